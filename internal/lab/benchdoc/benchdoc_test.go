package benchdoc

import (
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/throttled/throttled/throttle/limit
BenchmarkLimiterWait-2          4959702   120.0 ns/op   0 B/op   0 allocs/op
BenchmarkLimiterWait-2          4959702   140.0 ns/op   0 B/op   0 allocs/op
BenchmarkLimiterWaitAnchor-2    6204640   100.0 ns/op   0 B/op   0 allocs/op
BenchmarkLimiterWaitParallel-2  3955064   300.0 ns/op  24 B/op   1 allocs/op
BenchmarkLimiterWaitParallelAnchor-2 4585789 250.0 ns/op 0 B/op  0 allocs/op
pkg: github.com/throttled/throttled/sidecar
BenchmarkCheck-2        17883   68888 ns/op   4535 p99-us   12000 req/s   7976 B/op   87 allocs/op
BenchmarkCheckAnchor-2  16743   71566 ns/op   5295 p99-us   16000 req/s   7596 B/op   90 allocs/op
`

func TestTable(t *testing.T) {
	rs, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 6 {
		t.Fatalf("%d results; want 6", len(rs))
	}
	for _, tc := range []struct{ name, anchor, ratio, met string }{
		{"limit/LimiterWait", "LimiterWaitAnchor", "1.30× (ns/op)", "yes"},
		{"limit/LimiterWaitParallel", "LimiterWaitParallelAnchor", "1.20× (ns/op)", "no"}, // 1 alloc
		{"sidecar/Check", "CheckAnchor", "0.75× (req/s)", "no"},
	} {
		row := rowOf(t, Table(rs), tc.name)
		if row[4] != tc.anchor || row[5] != tc.ratio || row[7] != tc.met {
			t.Errorf("%s: anchor %q ratio %q met %q; want %q %q %q", tc.name, row[4], row[5], row[7], tc.anchor, tc.ratio, tc.met)
		}
	}
	if row := rowOf(t, Table(rs), "limit/LimiterWait"); row[2] != "130 ns/op (120–140)" {
		t.Errorf("readings %q", row[2])
	}
}

func rowOf(t *testing.T, table, name string) []string {
	t.Helper()
	for line := range strings.Lines(table) {
		// cells[1] is the benchmark, cells[2:8] the other columns.
		cells := strings.Split(strings.TrimSpace(line), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) == 9 && cells[1] == name {
			return cells
		}
	}
	t.Fatalf("no row %s in\n%s", name, table)
	return nil
}

func TestSplice(t *testing.T) {
	doc := "intro\n<!-- micro:begin -->\nold\n<!-- micro:end -->\n<!-- replay:begin -->\n<!-- replay:end -->\n"
	got, err := Splice(doc, "micro", "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n<!-- micro:begin -->\nnew\n<!-- micro:end -->\n<!-- replay:begin -->\n<!-- replay:end -->\n"; got != want {
		t.Errorf("Splice = %q", got)
	}
	if _, err := Splice("no markers", "micro", "x"); err == nil {
		t.Error("Splice without markers succeeded")
	}
}
