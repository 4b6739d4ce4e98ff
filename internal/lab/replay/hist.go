package replay

import (
	"math"
	"time"
)

// Histogram counts durations in logarithmic buckets: bucket i holds
// values in [g^i, g^(i+1)) microseconds with g = 1+2*RelativeError, and a
// quantile is reported as the bucket's geometric middle, so it is within
// RelativeError of a value in the bucket. Values under 1 µs count in the
// first bucket; values over an hour in the last. The zero value is not
// usable: make one with NewHistogram. It is not safe for concurrent use.
type Histogram struct {
	counts []uint64
	n      uint64
	max    time.Duration
}

// RelativeError bounds the error of Histogram quantiles: 1 %.
const RelativeError = 0.01

var (
	histGrowth  = 1 + 2*RelativeError
	histLogG    = math.Log(histGrowth)
	histBuckets = int(math.Ceil(math.Log(float64(time.Hour/time.Microsecond))/histLogG)) + 1
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram { return &Histogram{counts: make([]uint64, histBuckets)} }

func bucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return min(int(math.Log(us)/histLogG), histBuckets-1)
}

// Record adds one value.
func (h *Histogram) Record(d time.Duration) {
	h.counts[bucket(d)]++
	h.n++
	h.max = max(h.max, d)
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile returns the q-quantile (0 < q <= 1), within RelativeError; 0
// for an empty histogram. Quantile(1) is the exact maximum.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			mid := math.Pow(histGrowth, float64(i)+0.5)
			if i == 0 {
				mid = 1
			}
			return min(time.Duration(mid*float64(time.Microsecond)), h.max)
		}
	}
	return h.max
}

// worstSecond returns the index of the histogram, one per second, with
// the largest p99, and that p99; -1 and 0 where none holds a value.
func worstSecond(perSec []*Histogram) (int, time.Duration) {
	at, worst := -1, time.Duration(0)
	for i, h := range perSec {
		if h.Count() == 0 {
			continue
		}
		if q := h.Quantile(0.99); at < 0 || q > worst {
			at, worst = i, q
		}
	}
	return at, worst
}
