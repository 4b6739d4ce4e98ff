package replay

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := NewHistogram()
	var exact []time.Duration
	for range 100_000 {
		// Log-normal latencies around a millisecond, with a long tail.
		d := time.Duration(math.Exp(rng.NormFloat64()*1.2) * float64(time.Millisecond))
		h.Record(d)
		exact = append(exact, d)
	}
	slices.Sort(exact)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := exact[int(math.Ceil(q*float64(len(exact))))-1]
		got := h.Quantile(q)
		if rel := math.Abs(float64(got-want)) / float64(want); rel > RelativeError {
			t.Errorf("q%v: got %s, want %s within %v (off by %.4f)", q, got, want, RelativeError, rel)
		}
	}
	if got := h.Quantile(1); got != exact[len(exact)-1] {
		t.Errorf("max: got %s, want %s", got, exact[len(exact)-1])
	}
}

func TestHistogramEdges(t *testing.T) {
	h := NewHistogram()
	if h.Quantile(0.99) != 0 {
		t.Fatal("empty histogram: want 0")
	}
	h.Record(0)
	h.Record(2 * time.Hour)
	if h.Count() != 2 {
		t.Fatalf("count %d, want 2", h.Count())
	}
	if got := h.Quantile(0.5); got != time.Microsecond {
		t.Errorf("p50 of {0, 2h}: got %s, want 1µs", got)
	}
	if got := h.Quantile(1); got != 2*time.Hour {
		t.Errorf("max: got %s, want 2h", got)
	}
	o := NewHistogram()
	o.Record(3 * time.Millisecond)
	h.Merge(o)
	if h.Count() != 3 {
		t.Errorf("merged count %d, want 3", h.Count())
	}
}

func TestWorstSecondPlacesTheStall(t *testing.T) {
	secs := make([]*Histogram, 5)
	for i := range secs {
		secs[i] = NewHistogram()
	}
	for i := range 200 {
		for s := range secs {
			secs[s].Record(time.Duration(2+i%3) * time.Millisecond)
		}
	}
	// Second 3 holds a one-second stall: 5 of its 205 transactions
	// waited behind it, enough to move its p99 and no other second's.
	for range 5 {
		secs[3].Record(time.Second)
	}
	if at, p99 := worstSecond(secs); at != 3 || p99 < 900*time.Millisecond {
		t.Fatalf("worst second %d at %v; want second 3 at about 1 s", at, p99)
	}
	secs[3] = NewHistogram()
	if at, p99 := worstSecond(secs); at == 3 || p99 > 5*time.Millisecond {
		t.Fatalf("worst second %d at %v; want one of the even seconds, at most 5 ms, and never the empty one", at, p99)
	}
	if at, p99 := worstSecond(nil); at != -1 || p99 != 0 {
		t.Fatalf("worst of none: %d, %v; want -1, 0", at, p99)
	}
}
