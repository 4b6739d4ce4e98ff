package throttle

import (
	"fmt"
	"regexp"
	"testing"
)

// The reason names the budget the step decided, the one in the
// decision's Budget field: growing from 1/s toward 100/s (slow start, then
// binding near the target), every reason that names a budget names d's.
func TestReasonNamesTheDecidedBudget(t *testing.T) {
	budgetIn := regexp.MustCompile(`budget ([0-9.e+-]+)/s`)
	f := setup(t, Config{MaxBudget: 100, InitialBudget: 1, Rules: twoCores()})
	named := 0
	for i, load := range []float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.5, 0.6, 0.65, 0.65, 0.65, 0.65} {
		d := f.step(world{load: load, used: 0.3})
		m := budgetIn.FindStringSubmatch(d.Reason)
		if m == nil {
			continue
		}
		named++
		if want := fmt.Sprintf("%.3g", d.Budget); m[1] != want {
			t.Fatalf("step %d: reason %q names budget %s/s, the decision's Budget is %s/s", i, d.Reason, m[1], want)
		}
	}
	if named < 6 {
		t.Fatalf("only %d reasons named a budget; the test reads too little", named)
	}
}
