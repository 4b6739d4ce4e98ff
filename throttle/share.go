package throttle

import "math"

// claim is one job's claim on the budget.
type claim struct {
	weight float64
	floor  float64 // least rate, honoured while the budget allows
	cap    float64 // most rate: its MaxRate or its demand; +Inf for none
}

// share divides budget between claims by weighted max-min fairness: every
// job gets weight×λ, clamped to its [floor, cap], for the one level λ that
// spends the budget. A job that wants less than its fair share (an idle
// one) gets what it wants and the rest is lent to the others. When the
// floors alone exceed the budget they are scaled down together. When every
// job is capped, the remainder stays unspent.
func share(budget float64, claims []claim) []float64 {
	out := make([]float64, len(claims))
	if budget <= 0 || len(claims) == 0 {
		return out
	}
	var floors, caps float64
	for _, c := range claims {
		floors += min(c.floor, c.cap)
		caps += c.cap
	}
	if floors >= budget {
		for i, c := range claims {
			out[i] = min(c.floor, c.cap) * budget / floors
		}
		return out
	}
	if caps <= budget {
		for i, c := range claims {
			out[i] = c.cap
		}
		return out
	}
	at := func(level float64) float64 {
		var sum float64
		for i, c := range claims {
			out[i] = max(min(c.weight*level, c.cap), min(c.floor, c.cap))
			sum += out[i]
		}
		return sum
	}
	lo, hi := 0.0, 1.0
	for at(hi) < budget && hi < math.MaxFloat64/4 {
		hi *= 2
	}
	for range 100 {
		mid := (lo + hi) / 2
		if at(mid) < budget {
			lo = mid
		} else {
			hi = mid
		}
	}
	at(lo)
	return out
}
