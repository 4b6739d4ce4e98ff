package config

import (
	"strings"
	"testing"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// foreground_latency is off unless a signal block names it; the block is
// an ordinary rule, a ratio to the canary's baseline.
func TestForegroundLatencyRuleIsOptIn(t *testing.T) {
	c, err := Parse("throttled.hcl", []byte(smallest), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := c.Rules[signals.ForegroundLatency]; ok {
		t.Fatalf("foreground_latency has a rule by default: %+v", r)
	}
	c, err = Parse("throttled.hcl", []byte(smallest+`signal "foreground_latency" {
  target   = 1.3
  critical = 3
  required = true
}
`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := c.Rules[signals.ForegroundLatency]
	if !ok || r.Target != 1.3 || r.Critical != 3 || !r.Required {
		t.Fatalf("foreground_latency rule %+v, %v; want target 1.3, critical 3, required", r, ok)
	}
	if _, err := throttle.New(c.ControllerConfig()); err != nil {
		t.Fatalf("the controller refuses the rule: %v", err)
	}
	_, err = Parse("throttled.hcl", []byte(smallest+`signal "foreground_latency_seconds" {
  target = 0.01
}
`), getenv)
	if err == nil || !strings.Contains(err.Error(), "takes no rule") {
		t.Fatalf("a rule on foreground_latency_seconds: %v; want refused, it only informs", err)
	}
}
