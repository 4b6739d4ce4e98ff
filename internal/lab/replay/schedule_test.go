package replay

import (
	"slices"
	"strings"
	"testing"
)

// Every policy gets its pairs, the fixed rates share theirs in turns, an
// alone window sits before, between and after them (each leaving out its
// first second, after a/a's too), and a seed gives the
// same order again (a different seed another).
func TestScheduleGivesEveryPolicyItsPairs(t *testing.T) {
	kinds := []Window{{Policy: PolicyAA}, {Policy: PolicyFixed, Rate: 2}, {Policy: PolicyFixed, Rate: 8}, {Policy: PolicyAdaptive}}
	ws := Schedule(kinds, 10, 2, 1, true, 7)
	count := map[string]int{}
	for i, w := range ws {
		if w.Start != 2*i || w.End != w.Start+2 {
			t.Fatalf("window %d spans %d-%d", i, w.Start, w.End)
		}
		if (i%2 == 0) != (w.Policy == PolicyAlone) {
			t.Fatalf("window %d is %s: every other window must be the foreground alone", i, w.Label())
		}
		if w.Policy == PolicyAlone && w.Dropped != 1 {
			t.Fatalf("alone window %d drops %d seconds, want 1", i, w.Dropped)
		}
		count[w.Label()]++
	}
	want := map[string]int{PolicyAlone: 31, PolicyAA: 10, "fixed-2": 5, "fixed-8": 5, PolicyAdaptive: 10}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s: %d windows, want %d (all: %v)", k, count[k], n, count)
		}
	}
	labels := func(ws []Window) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Label())
		}
		return out
	}
	if !slices.Equal(labels(ws), labels(Schedule(kinds, 10, 2, 1, true, 7))) {
		t.Error("the same seed gave another order")
	}
	orders := map[string]bool{}
	for seed := range uint64(20) {
		orders[strings.Join(labels(Schedule(kinds, 10, 2, 1, true, seed)), " ")] = true
	}
	if len(orders) < 2 {
		t.Error("twenty seeds gave one order")
	}
	// Stretches: the controllers and a/a first, then unthrottled (none
	// here), then the fixed rates; each policy's windows together.
	var seen []string
	for _, w := range ws {
		if w.Policy == PolicyAlone {
			continue
		}
		if len(seen) == 0 || seen[len(seen)-1] != w.Label() {
			if slices.Contains(seen, w.Label()) {
				t.Fatalf("%s's windows are not in one stretch: %v", w.Label(), labels(ws))
			}
			seen = append(seen, w.Label())
		}
	}
	if len(seen) != 4 || seen[2] != "fixed-2" || seen[3] != "fixed-8" {
		t.Errorf("stretches in the order %v; want a/a and adaptive (either order), then the fixed rates", seen)
	}
	// Without a foreground, no alone windows.
	for _, w := range Schedule(kinds, 3, 2, 1, false, 7) {
		if w.Policy == PolicyAlone {
			t.Fatal("an alone window in a block without foreground")
		}
	}
}

// A block whose alone windows after a/a's kept every second (run on
// 2026-12-07, 01:20-02:10) is read as if each left out what the others
// do: a/a is judged on alone sides as long as a policy's.
func TestReadBlockEvensTheAloneDrops(t *testing.T) {
	sp := synth{seed: 61, winSec: 4, dropped: 1, perSec: 50}
	layout := thenInterleaved(interleaved(Window{Policy: PolicyAA}, 3), Window{Policy: PolicyAdaptive}, 3)
	b := sp.block(layout)
	b.Scenario = "surge"
	for i, w := range b.Windows {
		if w.Policy == PolicyAlone && i > 0 && b.Windows[i-1].Policy == PolicyAA {
			b.Windows[i].Dropped = 0
		}
	}
	dir := t.TempDir()
	if err := WriteBlock(dir, b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadBlock(BlockFile(dir, "surge"))
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range got.Windows {
		if w.Policy == PolicyAlone && w.Dropped != 1 {
			t.Errorf("alone window %d (after %s) leaves out %d seconds, want 1 as every other", i, got.Windows[max(i-1, 0)].Label(), w.Dropped)
		}
	}
}
