package signals

import (
	"errors"
	"testing"
	"time"
)

func TestWALRateIsMeasuredOverAWindow(t *testing.T) {
	t0 := time.Date(2026, 9, 13, 7, 33, 0, 0, time.UTC)
	var w walRate
	step := 250 * time.Millisecond
	// 1 MB/s, read every 250 ms: no rate before 2 s of readings.
	for i := range 8 {
		if _, err := w.add(t0.Add(time.Duration(i)*step), float64(i)*250e3); !errors.Is(err, errWALWarmup) {
			t.Fatalf("reading %d (%s): %v; want the warm-up error", i, time.Duration(i)*step, err)
		}
	}
	got, err := w.add(t0.Add(8*step), 8*250e3)
	if err != nil || got != 1e6 {
		t.Fatalf("after 2 s: %v, %v; want 1e6 bytes/s", got, err)
	}
	// A burst is averaged over the window, not read as its instant.
	got, err = w.add(t0.Add(9*step), 9*250e3+4e6)
	if err != nil || got < 2e6 || got > 3.5e6 {
		t.Fatalf("a 4 MB burst: %v, %v; want it spread over the window (2-3.5e6)", got, err)
	}
	// The window slides: memory stays bounded.
	for i := 10; i < 400; i++ {
		if _, err := w.add(t0.Add(time.Duration(i)*step), float64(i)*250e3+4e6); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(w.points); n > 10 {
		t.Fatalf("%d points kept; want about one window's", n)
	}
	// A gap of more than two windows (a sampler that stopped) starts over.
	if _, err := w.add(t0.Add(400*step+5*time.Second), 400*250e3+4e6); !errors.Is(err, errWALWarmup) {
		t.Fatalf("after a 5 s gap: %v; want the warm-up error", err)
	}
	// A position that goes back (a restored server) starts over.
	w.add(t0.Add(400*step+5*time.Second+step), 400*250e3+5e6) // within a window of the last
	if _, err := w.add(t0.Add(400*step+5*time.Second+2*step), 10); !errors.Is(err, errWALWarmup) || len(w.points) != 1 {
		t.Fatalf("after the position went back: %v; want the warm-up error", err)
	}
}
