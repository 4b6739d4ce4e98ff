package jobname

import (
	"fmt"
	"math"
)

// LimitNames are how a caller's users spell a job's three limits: Go
// field names for the libraries, the file's keys for the configuration.
type LimitNames struct{ Weight, MinRate, MaxRate string }

// LimitProblems is the one rule for a job's weight and rate limits
// (batches per second), shared by throttle, jobs and config: none may be
// negative, NaN or infinite (0 means the default: weight 1, no floor, no
// cap), and the floor may not exceed a cap. Each problem names its field
// as names spells it.
func LimitProblems(weight, minRate, maxRate float64, names LimitNames) []string {
	var out []string
	for _, f := range []struct {
		name string
		v    float64
	}{{names.Weight, weight}, {names.MinRate, minRate}, {names.MaxRate, maxRate}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			out = append(out, fmt.Sprintf("%s must be a number not below 0, got %v", f.name, f.v))
		}
	}
	if maxRate > 0 && minRate > maxRate {
		out = append(out, fmt.Sprintf("%s %v must not exceed %s %v", names.MinRate, minRate, names.MaxRate, maxRate))
	}
	return out
}
