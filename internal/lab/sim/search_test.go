package sim

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func row(eff, p, extra float64) SearchRow {
	return SearchRow{ScenarioStats: ScenarioStats{Efficiency: eff, POverGoal: p, ExtraCritical: extra}}
}

// dominates reports whether b dominates a: as much work or more, as much
// risk or less, and better on one.
func dominates(b, a SearchRow) bool {
	return b.Efficiency >= a.Efficiency && b.POverGoal <= a.POverGoal && (b.Efficiency > a.Efficiency || b.POverGoal < a.POverGoal)
}

// TestParetoFront: on a small result set, the front holds every row no
// other dominates and none that another does, ties kept, sorted by risk.
func TestParetoFront(t *testing.T) {
	rows := []SearchRow{
		row(0.10, 0.05, 0), // 0: front (least risk)
		row(0.30, 0.20, 0), // 1: front
		row(0.25, 0.20, 0), // 2: dominated by 1
		row(0.30, 0.25, 0), // 3: dominated by 1
		row(0.80, 0.85, 0), // 4: front (most work)
		row(0.30, 0.20, 5), // 5: ties 1: front too (the front is work and risk only)
		row(0.05, 0.05, 0), // 6: dominated by 0
		row(0.50, 0.90, 0), // 7: dominated by 4
		row(0.60, 0.50, 0), // 8: front
	}
	front := ParetoFront(rows)
	if want := []int{0, 1, 5, 8, 4}; !slices.Equal(front, want) {
		t.Errorf("front %v; want %v", front, want)
	}
	for i, a := range rows {
		in := slices.Contains(front, i)
		for j, b := range rows {
			if in && dominates(b, a) {
				t.Errorf("row %d is on the front, and row %d dominates it", i, j)
			}
		}
		if !in && !slices.ContainsFunc(front, func(j int) bool { return dominates(rows[j], a) }) {
			t.Errorf("row %d is off the front, and no row on it dominates it", i)
		}
	}
	if f := ParetoFront(nil); len(f) != 0 {
		t.Errorf("no rows, front %v", f)
	}
}

func TestBest(t *testing.T) {
	rows := []SearchRow{
		row(0.90, 0.50, 0),  // too risky
		row(0.40, 0.10, 15), // adds critical seconds
		row(0.30, 0.10, 0),  // best with none added
		row(0.20, 0.00, 0),
		row(0.45, 0.08, 20),
	}
	if b, ok := Best(rows, 0); !ok || b != 2 {
		t.Errorf("Best(0) = %d, %v; want 2", b, ok)
	}
	if b, ok := Best(rows, 15); !ok || b != 1 {
		t.Errorf("Best(15) = %d, %v; want 1", b, ok)
	}
	if _, ok := Best(rows[:2], 0); ok {
		t.Error("a best where none qualifies")
	}
	if l := LeastExtraCritical(rows[1:2]); l != 15 {
		t.Errorf("LeastExtraCritical = %v; want 15", l)
	}
	if l := LeastExtraCritical(rows); l != 0 {
		t.Errorf("LeastExtraCritical = %v; want 0", l)
	}
}

func TestSearchScenarios(t *testing.T) {
	var names []string
	for _, sc := range SearchScenarios() {
		names = append(names, sc.Name)
		if !slices.Contains(probed, sc.CanaryModel().Scenario) || sc.CanaryModel().Scenario != sc.Counterpart {
			t.Errorf("%s: counterpart %s, canary model %s", sc.Name, sc.Counterpart, sc.CanaryModel().Scenario)
		}
	}
	for _, want := range []string{"steady", "cores-halved", "slow-archiver", "steady-quiet"} {
		if !slices.Contains(names, want) {
			t.Errorf("the search runs %v; want %s among them", names, want)
		}
	}
	for _, not := range []string{"replica-slow", "batch-errors", "primary-saturates-lag-zero"} {
		if slices.Contains(names, not) {
			t.Errorf("the search runs %s, whose counterpart was not probed", not)
		}
	}
	// steady-quiet is steady's plant with quiet's models.
	sq := SearchScenarios()[len(names)-1]
	if sq.Name != "steady-quiet" || sq.LatencyModel().Scenario != "quiet" || sq.Duration != 600 {
		t.Errorf("steady-quiet: %s, %s's p99 model, %d s", sq.Name, sq.LatencyModel().Scenario, sq.Duration)
	}
}

// TestSearchSmall: a small search gives the same result with one worker
// as with three, a row per setting in order, and the canary's rule costs
// work and p99.
func TestSearchSmall(t *testing.T) {
	sc, _ := ScenarioNamed("steady")
	spec := SearchSpec{
		Scenarios:      []Scenario{sc},
		Seeds:          []uint64{1, 2},
		CanaryTargets:  []float64{1.05, 0},
		MaxGrowths:     []float64{DefaultMaxGrowth},
		BreachMemories: []time.Duration{DefaultBreachMemory},
		Sensitivity:    []Setting{{CanaryTarget: 1.05, MaxGrowth: DefaultMaxGrowth, BreachMemory: DefaultBreachMemory, CanaryNoise: -1}},
	}
	one, err := Search(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec.Workers = 3
	var calls []int
	three, err := Search(spec, func(done, total int) { calls = append(calls, done*10+total) })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one.Rows, three.Rows) || !reflect.DeepEqual(one.Sensitivity, three.Sensitivity) {
		t.Errorf("one worker and three differ:\n%+v\n%+v", one.Rows, three.Rows)
	}
	if !slices.Equal(calls, []int{13, 23, 33}) {
		t.Errorf("progress %v; want 1, 2, 3 of 3", calls)
	}
	if len(one.Rows) != 2 || len(one.Sensitivity) != 1 || one.Rows[0].Setting.CanaryTarget != 1.05 || one.Rows[1].Setting.CanaryTarget != 0 {
		t.Fatalf("rows %+v", one.Rows)
	}
	ruled, none := one.Rows[0], one.Rows[1]
	if ruled.Runs != 2 || len(ruled.PerScenario) != 1 || ruled.PerScenario[0].Runs != 2 {
		t.Errorf("runs: %+v", ruled)
	}
	if !(ruled.Efficiency < none.Efficiency) || !(ruled.P99Median < none.P99Median) || !(ruled.PerScenario[0].X < none.PerScenario[0].X) {
		t.Errorf("canary 1.05: work %.3f, p99 %.2f; none: %.3f, %.2f; want less of both with the canary", ruled.Efficiency, ruled.P99Median, none.Efficiency, none.P99Median)
	}
	// Steady's foreground alone is never critical: what a run spends
	// there is its own.
	if none.ExtraCritical != 0 || none.POverGoal != 1 {
		t.Errorf("steady without the canary: %.0f s added at critical, P(p99 > 1.10) %.2f; want 0 and 1", none.ExtraCritical, none.POverGoal)
	}
	if _, err := Search(SearchSpec{}, nil); err == nil {
		t.Error("an empty search ran")
	}
	spec.CanaryTargets = []float64{1}
	if _, err := Search(spec, nil); err == nil {
		t.Error("a search with a canary target of 1 ran")
	}
}
