package throttled

import (
	"testing"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// withResolution gives primary_load a step of one session on CPU, 1/cores,
// in solo and coordinated mode alike, and never overrides one the caller
// set or touches another rule. Before, solo clients (the replay's adaptive
// run among them) had no Resolution, so one quantized sample on 2 cores
// cut by the emergency share.
func TestWithResolution(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   throttle.Config
		cores float64
		want  float64
	}{
		{"defaults, 2 cores", throttle.Config{}, 2, 0.5},
		{"defaults, 8 cores", throttle.Config{}, 8, 0.125},
		{"no cores known", throttle.Config{}, 0, 0},
		{"caller's resolution kept", throttle.Config{Rules: map[signals.Name]throttle.Rule{signals.PrimaryLoad: {Target: 0.7, Resolution: 0.1}}}, 2, 0.1},
		{"caller's target kept", throttle.Config{Rules: map[signals.Name]throttle.Rule{signals.PrimaryLoad: {Target: 0.6}}}, 4, 0.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before map[signals.Name]throttle.Rule
			if tc.cfg.Rules != nil {
				before = map[signals.Name]throttle.Rule{}
				for k, v := range tc.cfg.Rules {
					before[k] = v
				}
			}
			got := withResolution(tc.cfg, tc.cores)
			if r := got.Rules[signals.PrimaryLoad]; r.Resolution != tc.want {
				t.Errorf("Resolution %v, want %v", r.Resolution, tc.want)
			}
			if tc.cfg.Rules != nil {
				if got.Rules[signals.PrimaryLoad].Target != before[signals.PrimaryLoad].Target {
					t.Errorf("Target %v, want %v", got.Rules[signals.PrimaryLoad].Target, before[signals.PrimaryLoad].Target)
				}
				if tc.cfg.Rules[signals.PrimaryLoad] != before[signals.PrimaryLoad] {
					t.Error("the caller's map was changed")
				}
			}
			if tc.cores > 0 && len(got.Rules) != max(1, len(tc.cfg.Rules)) {
				t.Errorf("rules %v: another rule was added", got.Rules)
			}
		})
	}
}
