package throttle

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// appSample is a Prometheus signal's sample beside a healthy primary.
func appSnap(now time.Time, app signals.Sample) signals.Snapshot {
	s := snap(now, world{load: 0.1})
	app.Name = "app_p99"
	s.Samples = append(s.Samples, app)
	return s
}

// A rule on a Prometheus signal (a ratio over its job-free level): it
// paces like foreground_latency, does not bind with no foreground, and
// fails closed on a failed, stale or warming reading, naming the signal
// and why.
func TestRuleOnAPrometheusSignal(t *testing.T) {
	rule := Rule{Target: 1.1, Critical: 2, Required: true, Ratio: true, MaxAge: 10 * time.Second}
	cfg := Config{Rules: map[signals.Name]Rule{"app_p99": rule}, External: []signals.Name{"app_p99"}}
	for _, tc := range []struct {
		name     string
		app      func(now time.Time) signals.Sample
		mode     status.Mode
		code     status.Code
		reason   []string
		bindsApp bool
	}{
		{"at its baseline it lets the work grow", func(now time.Time) signals.Sample {
			return signals.Sample{Value: 1, Raw: 1, At: now}
		}, status.ModeRunning, "", nil, false},
		{"over target it cuts", func(now time.Time) signals.Sample {
			return signals.Sample{Value: 1.3, Raw: 1.3, At: now}
		}, status.ModeThrottled, "", nil, true},
		{"no foreground does not bind", func(now time.Time) signals.Sample {
			return signals.Sample{NoForeground: true, At: now}
		}, status.ModeRunning, "", nil, false},
		{"a failed reading stops the work and says why", func(now time.Time) signals.Sample {
			return signals.Sample{At: now, Err: errors.New(`prometheus signal "app_p99" (throttled.hcl:7): query: 2 series, want one`)}
		}, status.ModeStale, status.CodeStale, []string{"app_p99", "throttled.hcl:7", "2 series"}, true},
		{"data older than max_age stops the work", func(now time.Time) signals.Sample {
			return signals.Sample{Value: 1, Raw: 1, At: now.Add(-40 * time.Second)}
		}, status.ModeStale, status.CodeStale, []string{"app_p99", "over max_age 10s"}, true},
		{"warming up holds the work without an event", func(now time.Time) signals.Sample {
			return signals.Sample{At: now, Err: fmt.Errorf("%w: no series yet", signals.ErrWarmingUp)}
		}, status.ModeThrottled, status.CodeWarmingUp, []string{"app_p99", "no series yet"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Register(JobConfig{Name: "purge"}); err != nil {
				t.Fatal(err)
			}
			var d Decision
			for i := 1; i <= 6; i++ {
				d = c.Step(at(i), appSnap(at(i), tc.app(at(i))))
			}
			if d.Mode != tc.mode {
				t.Fatalf("mode %s (%s), want %s", d.Mode, d.Reason, tc.mode)
			}
			if tc.code != "" && d.Code != tc.code {
				t.Errorf("code %s, want %s", d.Code, tc.code)
			}
			for _, w := range tc.reason {
				if !strings.Contains(d.Reason, w) {
					t.Errorf("reason %q does not say %q", d.Reason, w)
				}
			}
			if got := d.Binding.Signal == "app_p99"; got != tc.bindsApp {
				t.Errorf("binding %v, want app_p99: %v", d.Binding, tc.bindsApp)
			}
			if (tc.mode == status.ModeStale || tc.code == status.CodeWarmingUp) && d.Budget != 0 {
				t.Errorf("budget %v, want 0: the work holds", d.Budget)
			}
		})
	}
}

// A rule on a signal of the operator's own: a valid name that is no
// built-in; a ratio target above 1.
func TestRuleOnAPrometheusSignalValidates(t *testing.T) {
	for _, tc := range []struct {
		name signals.Name
		rule Rule
		want string
	}{
		{"app_p99", Rule{Target: 1.1, Ratio: true}, ""},
		{"app_p99", Rule{Target: 0.9, Ratio: true}, "must be above 1"},
		{"app_errors", Rule{Target: 0.01}, ""},
		{"App-P99", Rule{Target: 1.1}, "unknown signal"},
	} {
		_, err := New(Config{Rules: map[signals.Name]Rule{tc.name: tc.rule}, External: []signals.Name{"app_p99", "app_errors"}})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %+v: %v", tc.name, tc.rule, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %+v: %v, want %q", tc.name, tc.rule, err, tc.want)
		}
	}
}
