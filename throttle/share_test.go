package throttle

import (
	"math"
	"testing"
)

func TestShare(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name   string
		budget float64
		claims []claim
		want   []float64
	}{
		{"by weight", 40, []claim{{weight: 1, cap: inf}, {weight: 3, cap: inf}}, []float64{10, 30}},
		{"idle job's share is lent", 40, []claim{{weight: 1, cap: 2}, {weight: 1, cap: inf}, {weight: 2, cap: inf}}, []float64{2, 38.0 / 3, 76.0 / 3}},
		{"max rate caps", 40, []claim{{weight: 1, cap: 5}, {weight: 1, cap: inf}}, []float64{5, 35}},
		{"floor kept", 10, []claim{{weight: 1, floor: 6, cap: inf}, {weight: 1, cap: inf}}, []float64{6, 4}},
		{"floors over the budget scale down", 10, []claim{{weight: 1, floor: 10, cap: inf}, {weight: 1, floor: 10, cap: inf}}, []float64{5, 5}},
		{"all capped: the rest unspent", 40, []claim{{weight: 1, cap: 3}, {weight: 1, cap: 4}}, []float64{3, 4}},
		{"zero budget", 0, []claim{{weight: 1, floor: 5, cap: inf}}, []float64{0}},
		{"no claims", 10, nil, []float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := share(tc.budget, tc.claims)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
			var sum float64
			for i := range got {
				sum += got[i]
				if math.Abs(got[i]-tc.want[i]) > 1e-6 {
					t.Fatalf("got %v; want %v", got, tc.want)
				}
			}
			if sum > tc.budget+1e-9 {
				t.Fatalf("shares %v exceed the budget %v", got, tc.budget)
			}
		})
	}
}
