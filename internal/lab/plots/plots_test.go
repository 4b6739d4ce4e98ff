package plots

import (
	"cmp"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRegionsJoinConsecutiveSamples(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int, v float64) Point { return Point{T: t0.Add(time.Duration(s) * time.Second), V: v} }
	got := Regions([]Point{at(3, 1), at(1, 1), at(2, 1), at(4, 0), at(9, 1), at(10, 1)}, 2*time.Second, "h1")
	want := []Region{{at(1, 0).T, at(3, 0).T, "h1"}, {at(9, 0).T, at(10, 0).T, "h1"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("regions %v; want %v", got, want)
	}
}

// The overview draws as one PNG, and shades a hold across the panels: a
// pixel inside the hold's span is tinted, one outside it is not.
func TestOverviewDrawsWithHoldsShaded(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var load, budget []Point
	for s := range 120 {
		at := t0.Add(time.Duration(s) * time.Second)
		load = append(load, Point{at, 0.5 + 0.004*float64(s)})
		budget = append(budget, Point{at, 5})
	}
	o := Overview{Title: "test", Load: load, Budget: budget, Target: 0.7, Critical: 1,
		Mode:  []Point{{t0, 0}, {t0.Add(60 * time.Second), 2}, {t0.Add(119 * time.Second), 2}},
		Holds: []Region{{Start: t0.Add(60 * time.Second), End: t0.Add(119 * time.Second), Label: "manual hold h1"}}}
	path := filepath.Join(cmp.Or(os.Getenv("PLOT_KEEP"), t.TempDir()), "o.png")
	if err := o.WritePNG(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() < 800 || b.Dy() < 1000 {
		t.Fatalf("image %v; want one tall figure", b)
	}
	// Count tinted (orange-ish background) pixels on a row through the
	// last panel, left and right of the middle.
	y := b.Max.Y - b.Dy()/12
	tinted := func(x0, x1 int) (n int) {
		for x := x0; x < x1; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 > 240 && g>>8 > 200 && g>>8 < 245 && bl>>8 < 220 {
				n++
			}
		}
		return n
	}
	left, right := tinted(b.Dx()/6, b.Dx()/2-20), tinted(b.Dx()/2+40, b.Dx()-b.Dx()/8)
	if right < 100 || left > 10 {
		t.Fatalf("tinted pixels: %d before the hold, %d during it", left, right)
	}
	if err := (Overview{}).WritePNG(path); err == nil || !strings.Contains(err.Error(), "no samples") {
		t.Fatalf("empty overview: %v", err)
	}
}

// A 0 sample ends a run: a hold released and made again (1, 0, 1 at
// one-second steps) is two regions, not one, even when the gap allowed
// between samples is two steps.
func TestRegionsZeroEndsARun(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int, v float64) Point { return Point{T: t0.Add(time.Duration(s) * time.Second), V: v} }
	got := Regions([]Point{at(1, 1), at(2, 0), at(3, 1)}, 2*time.Second, "h1")
	if len(got) != 2 {
		t.Fatalf("regions %v; want two: the 0 at t=2 ends the first", got)
	}
}
