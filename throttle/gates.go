package throttle

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
)

// A gate is a job rule ([Config.JobRules]) applied to one job: go or
// no-go, freno's and Vitess's per-app check, beside the shared budget
// that the cluster rules shape. A job whose gate reads over its Target,
// or cannot be read, is paused with [status.CodeGated] while the other
// jobs take its share. The cluster rules (load, headroom, lag, every critical level)
// bind every job whatever its gates: they protect the primary all jobs
// share.
//
// Which gates bind a job: every job rule, or only those its
// JobConfig.Signals names. A rule on vacuum_running binds a job on the
// tables it lists (JobConfig.Tables) and on no other: a job is not paused
// by autovacuum on a table it never touches.

// DefaultGateHold is how long a gate stays shut after its signal last
// read over target, so a reading that hovers at its target does not
// start and stop the job every tick.
const DefaultGateHold = 5 * time.Second

// gateSignal reports why name cannot be a job rule, or "".
func gateSignal(name signals.Name) string {
	switch {
	case name == signals.ConnectionHeadroom || name == signals.ConnectionUsedFraction:
		return "connection headroom is the whole server's: it is a cluster rule"
	case perReplica(name):
		return "it has one sample per replica: it is a cluster rule"
	case signals.Conditional(name) && name != signals.VacuumRunning:
		return "it has samples only while what it describes exists; a job rule reads its summary (slot_retained_bytes_max, xmin_horizon_age_seconds)"
	case name == "" || strings.ContainsAny(string(name), "{}\"= "):
		return "not a signal name"
	}
	return ""
}

// gate is one job rule's reading for one job.
type gate struct {
	key       string       // the sample's key: vacuum_running{table="public.events"}
	name      signals.Name // the rule's signal: vacuum_running
	rule      Rule
	value     float64
	unknown   string
	over      bool
	shutUntil time.Time
}

// gatesFor reads the job rules that bind job s at now, and reports the
// shut ones.
func (c *Controller) gatesFor(now time.Time, snap signals.Snapshot, j status.Job, s *jobState) []gate {
	var shut []gate
	for _, name := range c.gateNames(s.cfg) {
		if s.gates == nil {
			s.gates = map[string]time.Time{}
		}
		rule, ok := c.cfg.JobRules[name]
		if !ok {
			shut = append(shut, gate{key: string(name), name: name, unknown: "no job rule of that name"})
			continue
		}
		for _, g := range c.readGates(now, snap, name, rule, s.cfg.Tables) {
			switch {
			case g.unknown != "":
				shut = append(shut, g)
			case g.over:
				s.gates[g.key] = now.Add(c.cfg.GateHold)
				shut = append(shut, g)
			case now.Before(s.gates[g.key]):
				g.shutUntil = s.gates[g.key]
				shut = append(shut, g)
			}
		}
	}
	return shut
}

// gateNames are the job rules that bind a job: the ones it names, else
// every one.
func (c *Controller) gateNames(j JobConfig) []signals.Name {
	if j.Signals != nil || len(c.cfg.JobRules) == 0 {
		return j.Signals
	}
	return slices.Sorted(maps.Keys(c.cfg.JobRules))
}

// readGates reads rule on name for a job on tables: one reading per table
// for vacuum_running (none for a job that lists no table), else the
// signal's one unlabelled sample.
func (c *Controller) readGates(now time.Time, snap signals.Snapshot, name signals.Name, rule Rule, tables []string) []gate {
	if name != signals.VacuumRunning {
		s, ok := snap.Get(name, nil)
		return []gate{c.readGate(now, name, string(name), rule, s, ok)}
	}
	var out []gate
	for _, t := range tables {
		s, ok := signals.VacuumOn(snap, t)
		key := signals.Sample{Name: name, Labels: map[string]string{signals.LabelTable: t}}.Key()
		if !ok && s.Err != nil {
			out = append(out, gate{key: key, name: name, rule: rule, unknown: "error: " + s.Err.Error()})
			continue
		}
		out = append(out, c.readGate(now, name, key, rule, s, ok))
	}
	return out
}

func (c *Controller) readGate(now time.Time, name signals.Name, key string, rule Rule, s signals.Sample, ok bool) gate {
	g := gate{key: key, name: name, rule: rule}
	if !ok {
		g.unknown = "not sampled"
		return g
	}
	e := ruleEval{rule: rule}
	c.read(now, &e, s)
	if e.unknown != "" {
		g.unknown = e.unknown
		return g
	}
	g.value = math.Max(s.Value, s.Raw)
	g.over = g.value > rule.Target
	return g
}

// gatedReason says which gates shut a job.
func gatedReason(gs []gate) string {
	var parts []string
	for _, g := range gs {
		switch {
		case g.unknown != "":
			parts = append(parts, fmt.Sprintf("%s unknown (%s)", g.key, g.unknown))
		case g.over:
			parts = append(parts, fmt.Sprintf("%s at %.4g, over %.4g", g.key, g.value, g.rule.Target))
		default:
			parts = append(parts, fmt.Sprintf("%s at %.4g, back under %.4g; opens at %s", g.key, g.value, g.rule.Target, g.shutUntil.UTC().Format(time.RFC3339)))
		}
	}
	return "gated: " + strings.Join(parts, "; ")
}

// GateUnion is what binds a job that several workers declare: every table
// any of them writes, and the union of the job rules they name, or every
// job rule (nil) when any of them names none. A worker's tables and rules
// never loosen another's.
func GateUnion[W any](ws []W, of func(W) (tables, signals []string)) ([]string, []signals.Name) {
	var tables []string
	var sigs []signals.Name
	all := false
	for _, w := range ws {
		t, s := of(w)
		for _, x := range t {
			if x = signals.TableName(x); !slices.Contains(tables, x) {
				tables = append(tables, x)
			}
		}
		if s == nil {
			all = true
		}
		for _, x := range s {
			if !slices.Contains(sigs, signals.Name(x)) {
				sigs = append(sigs, signals.Name(x))
			}
		}
	}
	slices.Sort(tables)
	if all {
		return tables, nil
	}
	slices.Sort(sigs)
	if sigs == nil {
		sigs = []signals.Name{}
	}
	return tables, sigs
}
