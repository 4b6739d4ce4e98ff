package throttle

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// ruleEval is one rule applied to one sample.
type ruleEval struct {
	key        string // the sample's key (signals.Sample.Key): name and labels, for maps and messages
	name       signals.Name
	labels     map[string]string // the sample's labels; nil for a signal of the primary as a whole
	rule       Rule
	required   bool
	value, raw float64 // as the rule reads it: the free fraction for headroom
	pressure   float64 // smoothed value over target
	rawPress   float64
	unknown    string // why the sample is unusable; "" when usable
	warming    bool   // unusable because the signal is still learning (signals.ErrBaselineWarmup, ErrWarmingUp)
	idle       bool   // no foreground to protect (signals.Sample.NoForeground): does not bind
	at         time.Time
	fresh      bool // a sample not seen at an earlier step
}

// binding is the signal e reads, as a decision names it.
func (e ruleEval) binding() status.Binding { return status.Binding{Signal: e.name, Labels: e.labels} }

// oneStepLower is the raw pressure the sample would have one Resolution
// step better: what a single sample proves beyond quantization.
func (e ruleEval) oneStepLower() float64 {
	if lowerIsWorse(e.name) {
		return pressure(e.name, e.rule.ratio(e.name), e.raw+e.rule.Resolution, e.rule.Target)
	}
	return pressure(e.name, e.rule.ratio(e.name), e.raw-e.rule.Resolution, e.rule.Target)
}

// evaluate applies every rule to the snapshot.
func (c *Controller) evaluate(now time.Time, snap signals.Snapshot) []ruleEval {
	var out []ruleEval
	for _, name := range c.cfg.ruleOrder() {
		rule, ok := c.cfg.Rules[name]
		if !ok {
			continue
		}
		if perReplica(name) {
			out = append(out, c.evaluateReplicas(now, snap, name, rule)...)
			continue
		}
		sampleName := name
		if name == signals.ConnectionHeadroom {
			sampleName = signals.ConnectionUsedFraction
		}
		s, ok := snap.Get(sampleName, nil)
		if name == signals.ConnectionHeadroom {
			s = withPool(s, snap)
		}
		e := ruleEval{key: string(name), name: name, rule: rule, required: rule.Required}
		if !ok {
			e.unknown = "not sampled"
		} else {
			c.read(now, &e, s)
		}
		out = append(out, e)
	}
	return out
}

func (c *Controller) evaluateReplicas(now time.Time, snap signals.Snapshot, name signals.Name, rule Rule) []ruleEval {
	var out []ruleEval
	seen := map[string]bool{}
	for _, s := range snap.Samples {
		if s.Name != name {
			continue
		}
		replica := s.Labels[signals.LabelReplica]
		seen[replica] = true
		policy := c.replicaPolicy(replica)
		if policy == ReplicaIgnored {
			continue
		}
		e := ruleEval{key: s.Key(), name: name, labels: s.Labels, rule: rule, required: policy == ReplicaRequired}
		c.read(now, &e, s)
		out = append(out, e)
	}
	// A required replica that is not even in the snapshot is unknown.
	for replica, p := range c.cfg.Replicas {
		if p == ReplicaRequired && !seen[replica] {
			labels := map[string]string{signals.LabelReplica: replica}
			key := signals.Sample{Name: name, Labels: labels}.Key()
			out = append(out, ruleEval{key: key, name: name, labels: labels, rule: rule, required: true, unknown: "not sampled"})
		}
	}
	slices.SortFunc(out, func(a, b ruleEval) int { return strings.Compare(a.key, b.key) })
	return out
}

func (c *Controller) replicaPolicy(name string) ReplicaPolicy {
	if p, ok := c.cfg.Replicas[name]; ok {
		return p
	}
	return ReplicaOptional
}

// read fills e from sample s: usable, or why not.
func (c *Controller) read(now time.Time, e *ruleEval, s signals.Sample) {
	e.at = s.At
	switch why := Unfresh(now, s, e.rule.MaxAge); {
	case s.Err != nil:
		e.unknown = "error: " + s.Err.Error()
		e.warming = errors.Is(s.Err, signals.ErrBaselineWarmup) || errors.Is(s.Err, signals.ErrWarmingUp)
		return
	case why != "":
		e.unknown = why
		return
	case s.NoForeground:
		// Nothing to protect: the rule does not bind, as on an idle
		// primary (pressure 0).
		e.idle = true
		return
	case !finite(s.Value) || !finite(s.Raw):
		e.unknown = fmt.Sprintf("non-finite value %v (raw %v)", s.Value, s.Raw)
		return
	}
	e.value, e.raw = s.Value, s.Raw
	if e.name == signals.ConnectionHeadroom {
		e.value, e.raw = max(0, 1-s.Value), max(0, 1-s.Raw)
	}
	ratio := e.rule.ratio(e.name)
	e.pressure, e.rawPress = pressure(e.name, ratio, e.value, e.rule.Target), pressure(e.name, ratio, e.raw, e.rule.Target)
}

// Unfresh says why sample s is too old or too new to trust at now under
// a rule's maxAge: older than it, or taken further than it in the future
// (a clock that far off cannot vouch for the sample's freshness); "" when
// its age is within. It is the controller's one judgment of a sample's
// age, which every status surface shows as stale.
func Unfresh(now time.Time, s signals.Sample, maxAge time.Duration) string {
	switch age := s.Age(now); {
	case age > maxAge:
		return fmt.Sprintf("age %s over max_age %s", age.Round(time.Millisecond), maxAge)
	case age < -maxAge:
		return fmt.Sprintf("taken %s in the future (clock skew)", (-age).Round(time.Millisecond))
	}
	return ""
}

// withPool is the server's used fraction of client slots, s, counting a
// PgBouncer's pools too when one is sampled: the fuller of the two is the
// headroom left, since a job's connection waits in a full pool as surely
// as it is refused by a full server. A pool read that failed makes the
// headroom unknown (fail closed); no PgBouncer sampled leaves s as it is.
func withPool(s signals.Sample, snap signals.Snapshot) signals.Sample {
	pool, ok := snap.Get(signals.PgBouncerPoolUsedFractionMax, nil)
	switch {
	case !ok || s.Err != nil:
		return s
	case pool.Err != nil:
		s.Err = fmt.Errorf("PgBouncer's pools: %w", pool.Err)
	case pool.Value > s.Value || pool.Raw > s.Raw:
		s.Value, s.Raw = max(s.Value, pool.Value), max(s.Raw, pool.Raw)
		s.At = minTime(s.At, pool.At)
	default:
		s.At = minTime(s.At, pool.At)
	}
	return s
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// pressure is a reading of signal n against its rule's target: 1 at the
// target, over 1 past it. For connection_headroom, a level to stay over,
// it is target/v. For foreground_latency and every ratio rule (a ratio to
// the level without jobs), it is the excess over that baseline against the excess the target
// allows, (v-1)/(target-1): 0 at the baseline, as a level of 0 is for a
// load, so that "far under target" and the growth that goes with it mean
// the same on every signal. (As v/target, a foreground at its baseline
// read 0.77 of a 1.3 target: never far under it, so a new leader on an
// idle primary never came back to the initial budget, and growth crept.)
func pressure(n signals.Name, ratio bool, v, target float64) float64 {
	switch {
	case lowerIsWorse(n):
		return target / max(v, 1e-9)
	case ratio:
		return max(0, v-1) / (target - 1)
	}
	return v / target
}

// trend is an integrating signal's direction over its recent samples.
type trend struct {
	last  float64
	rises int // consecutive fresh samples each above the one before
}

// Rising lag: risingSamples fresh samples in a row, each higher than the
// one before, with the last at risingShare of the target or more. Below
// that share the lag is noise around zero.
const (
	risingSamples = 3
	risingShare   = 0.25
)

// rising records e's fresh sample and reports whether the signal has
// risen at each of its last risingSamples samples, from risingShare of its
// target.
func (c *Controller) rising(e ruleEval) bool {
	tr, ok := c.trends[e.key]
	switch {
	case !ok:
	case e.raw > tr.last:
		tr.rises++
	default:
		tr.rises = 0
	}
	tr.last = e.raw
	c.trends[e.key] = tr
	return tr.rises >= risingSamples && e.rawPress >= risingShare
}

// integrates reports whether n accumulates the excess of the rate it is
// paced on, so a cut shows in it only over time: replica lag, the
// archiver's backlog, the WAL a slot retains.
func integrates(n signals.Name) bool {
	return n == signals.ReplicaLagBytes || n == signals.ReplicaLagSeconds || n == signals.ReplicaReplayBacklogBytes ||
		n == signals.ArchivePendingSegments || n == signals.SlotRetainedBytesMax
}
