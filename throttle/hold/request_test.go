package hold

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestExemptIsChecked(t *testing.T) {
	for _, r := range []Request{
		{Scope: AllJobs(), Source: SourceCLI, Reason: "x", Exempt: "Replica Lag"},
		{Scope: AllJobs(), Source: SourceCLI, Reason: "x", Exempt: "replica_lag{replica=\"r1\"}"},
		{Scope: AllJobs(), Source: SourceCLI, Reason: "x", Exempt: "replica_lag", Ratio: 0.5},
	} {
		if _, err := r.Check(TTLPolicy{Default: time.Hour}); err == nil || !strings.Contains(err.Error(), "exempt") {
			t.Errorf("%+v: %v; want refused", r, err)
		}
	}
	if p := Pausing([]Hold{{ID: "e", Exempt: "replica_lag"}}); len(p) != 0 {
		t.Errorf("an exemption pauses: %v", p)
	}
	if s, by := Scale([]Hold{{ID: "e", Exempt: "replica_lag"}}); s != 1 || by != nil {
		t.Errorf("an exemption scales: %v by %v", s, by)
	}
}

func TestRatioIsChecked(t *testing.T) {
	for _, r := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		if _, err := (Request{Scope: AllJobs(), Source: SourceCLI, Reason: "x", Ratio: r}).Check(TTLPolicy{Default: time.Hour}); err == nil || !strings.Contains(err.Error(), "ratio") {
			t.Errorf("ratio %v: %v; want refused", r, err)
		}
	}
	hs := []Hold{{ID: "a", Ratio: 0.5}, {ID: "b", Ratio: 0.2}, {ID: "c"}}
	if s, by := Scale(hs); s != 0.2 || by.ID != "b" {
		t.Errorf("Scale = %v by %v; want 0.2 by b", s, by)
	}
	if p := Pausing(hs); len(p) != 1 || p[0].ID != "c" {
		t.Errorf("Pausing = %v; want only c", p)
	}
}
