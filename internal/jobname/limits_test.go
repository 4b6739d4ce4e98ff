package jobname

import (
	"math"
	"strings"
	"testing"
)

func TestLimitProblems(t *testing.T) {
	names := LimitNames{"weight", "min_rate", "max_rate"}
	for _, tc := range []struct {
		w, lo, hi float64
		want      string // "" for none; else a substring of the only problem
	}{
		{0, 0, 0, ""},
		{2, 1, 5, ""},
		{1, 5, 0, ""}, // no cap
		{-1, 0, 0, "weight must be a number not below 0, got -1"},
		{math.NaN(), 0, 0, "weight must be a number not below 0, got NaN"},
		{1, 0, math.Inf(1), "max_rate must be a number not below 0, got +Inf"},
		{1, 6, 5, "min_rate 6 must not exceed max_rate 5"},
	} {
		got := LimitProblems(tc.w, tc.lo, tc.hi, names)
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("(%v, %v, %v): %v; want none", tc.w, tc.lo, tc.hi, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("(%v, %v, %v): %v; want %q", tc.w, tc.lo, tc.hi, got, tc.want)
		}
	}
}
