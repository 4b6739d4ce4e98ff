package status

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle/hold"
)

// Why is what limits a job, as one word of a bounded set, fit for a
// metric's label: the one word every edge shows for it, the why label of
// throttled_jobs_state (now) and of throttled_jobs_limited_seconds_total
// (the time spent at each), the API's why and limited_seconds, and the
// CLI's summaries. Derive it with [WhyOf]; list the set with [Whys].
// The set:
//
//   - [WhyFullRate]: the job, or the whole budget, is at its max_rate;
//   - [WhyGrowth]: nothing binds; the budget grows toward max_rate;
//   - a rule's signal name ("foreground_latency", "primary_load",
//     "replica_lag_seconds", ...), without labels, when it binds, cuts or
//     holds the budget; [WhyBatchErrors] when failing batches do;
//   - the name of an external signal (a Prometheus signal, such as
//     "api_p99") when one binds, where the caller passes the signals of
//     its configuration (throttle.Config.External): bounded by that
//     configuration, and refused there when it is one of this set's
//     other words;
//   - [WhySlowStart] (also a new leader's inherited budget), [WhyBreach];
//   - the codes that say it themselves: low_utilization, not_growing,
//     warming_up, unavailable, exempt, gated, critical, stale;
//   - "hold:<source>" for a hold that pauses or scales it, by the hold's
//     source (manual, auto, grafana-alert, cli, window);
//   - [WhyOther] for anything else (a signal no rule may name, an
//     external signal the caller did not pass, a hold of an unknown
//     source, a code without a signal).
type Why string

// The words of the bounded set that are not signals' names or holds.
const (
	WhyFullRate       Why = "full_rate"
	WhyGrowth         Why = "growth"
	WhySlowStart      Why = "slow_start"
	WhyBreach         Why = "breach_memory"
	WhyBatchErrors    Why = "batch_errors"
	WhyLowUtilization Why = "low_utilization"
	WhyNotGrowing     Why = "not_growing"
	WhyWarmingUp      Why = "warming_up"
	WhyUnavailable    Why = "unavailable"
	WhyExempt         Why = "exempt"
	WhyGated          Why = "gated"
	WhyCritical       Why = "critical"
	WhyStale          Why = "stale"
	WhyOther          Why = "other"
)

// whyWords are the words of the set that are neither signals nor holds:
// no external signal may have one's name.
var whyWords = []Why{WhyFullRate, WhyGrowth, WhySlowStart, WhyBreach, WhyBatchErrors, WhyLowUtilization, WhyNotGrowing, WhyWarmingUp,
	WhyUnavailable, WhyExempt, WhyGated, WhyCritical, WhyStale, WhyOther}

// ruleSignals are the built-in signals a controller's rule may name, in
// the order rules are read: each is a why of its own when it limits a job.
var ruleSignals = []signals.Name{
	signals.PrimaryLoad, signals.PrimaryIOWait, signals.PrimaryLockWait, signals.ForegroundLatency,
	signals.ConnectionHeadroom, signals.ReplicaLagBytes, signals.ReplicaLagSeconds,
	signals.ReplicaReplayBacklogBytes,
	signals.XminHorizonAgeSeconds, signals.XminHorizonAgeXIDs, signals.SlotRetainedBytesMax, signals.WraparoundFraction,
	signals.WALBytesPerSecond, signals.ArchivePendingSegments, signals.ArchiveFailing,
	signals.PgBouncerWaitingClientsMax, signals.PgBouncerMaxWaitSecondsMax, signals.PgBouncerPoolUsedFractionMax,
}

// RuleSignals lists the built-in signals a controller's rule may name, in
// the order rules are read: a rule on any other must be on one of the
// controller's external signals (throttle.Config.External).
func RuleSignals() []signals.Name { return slices.Clone(ruleSignals) }

// whyHoldPrefix starts the why of a job a hold pauses or scales.
const whyHoldPrefix = "hold:"

// holdSources are the sources a hold's why may name: every one.
var holdSources = hold.Sources()

// WhyHeld is the why of a job a hold of source src pauses or scales.
func WhyHeld(src hold.Source) Why {
	if !slices.Contains(holdSources, src) {
		return whyHoldPrefix + WhyOther
	}
	return Why(whyHoldPrefix + string(src))
}

// WhyOf is the why of a job's status: derived from its code, binding and
// holds, never from its reason's text. external are the signals beyond
// the built-in ones that may be the why when they bind (the controller's
// throttle.Config.External); a binding signal not among them is [WhyOther].
func WhyOf(st JobStatus, external ...signals.Name) Why {
	code := st.Code
	if code == "" {
		code = CodeOf(st.State)
	}
	switch code {
	case CodeMaxRate:
		return WhyFullRate
	case CodeRunning:
		return WhyGrowth
	case CodeSlowStart, CodeInherited:
		return WhySlowStart
	case CodeBreach:
		return WhyBreach
	case CodeBinding, CodeCut, CodeHolding, CodeTooSlow:
		return WhySignal(st.Binding, external...)
	case CodeHeld, CodeScaled:
		i := 0
		if code == CodeScaled {
			// The ratio hold that scales it, not a hold beside it.
			i = max(0, slices.IndexFunc(st.Holds, func(h hold.Hold) bool { return h.Ratio > 0 }))
		}
		if len(st.Holds) == 0 {
			return whyHoldPrefix + WhyOther
		}
		return WhyHeld(st.Holds[i].Source)
	case CodeLowUtilization:
		return WhyLowUtilization
	case CodeNotGrowing:
		return WhyNotGrowing
	case CodeWarmingUp:
		return WhyWarmingUp
	case CodeUnavailable:
		return WhyUnavailable
	case CodeExempt:
		return WhyExempt
	case CodeGated:
		return WhyGated
	case CodeCritical:
		return WhyCritical
	case CodeStale:
		return WhyStale
	}
	return WhyOther
}

// WhySignal is the why of a budget a binding signal limits: its name,
// without its labels (replica_lag_seconds for every replica's), when a
// rule may name it or it is one of external (a valid name that is none of
// the set's other words), batch_errors for failing batches, and other for
// anything else.
func WhySignal(b Binding, external ...signals.Name) Why {
	switch {
	case b.Signal == BindingErrors:
		return WhyBatchErrors
	case slices.Contains(ruleSignals, b.Signal):
		return Why(b.Signal)
	case slices.Contains(external, b.Signal) && externalWhy(b.Signal):
		return Why(b.Signal)
	}
	return WhyOther
}

// externalWhy reports whether an external signal's name n may be a why:
// a valid name (so no built-in signal's) and none of the set's words.
func externalWhy(n signals.Name) bool {
	return signals.ValidName(n) && !slices.Contains(whyWords, Why(n))
}

// Whys lists every why, sorted: the bounded set a label takes, with the
// names of the external signals given (as [WhyOf] takes them).
func Whys(external ...signals.Name) []Why {
	out := slices.Clone(whyWords)
	out = append(out, whyHoldPrefix+WhyOther)
	for _, n := range ruleSignals {
		out = append(out, Why(n))
	}
	for _, n := range external {
		if externalWhy(n) {
			out = append(out, Why(n))
		}
	}
	for _, s := range holdSources {
		out = append(out, WhyHeld(s))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Phrase is w in words, for a summary: "at full rate", "limited by
// foreground_latency", "slow start", "held (manual)".
func (w Why) Phrase() string {
	switch {
	case w == WhyFullRate:
		return "at full rate"
	case w == WhyGrowth:
		return "growing"
	case w == WhyBreach:
		return "below a recent breach"
	case w == WhyBatchErrors:
		return "limited by batch errors"
	case strings.HasPrefix(string(w), whyHoldPrefix):
		return "held (" + strings.TrimPrefix(string(w), whyHoldPrefix) + ")"
	case slices.Contains(ruleSignals, signals.Name(w)), externalWhy(signals.Name(w)):
		return "limited by " + string(w)
	}
	return strings.ReplaceAll(string(w), "_", " ")
}

// WhyShare is one why's share of a job's time, in whole percent.
type WhyShare struct {
	Why     Why
	Percent int
}

// Shares turns seconds per why into whole percentages that add up to 100
// (largest remainders), largest first (ties by why), leaving out the whys
// whose share rounds to 0.
func Shares(secs map[Why]float64) []WhyShare {
	total := totalSeconds(secs)
	if !(total > 0) || math.IsInf(total, 0) {
		return nil
	}
	type part struct {
		why  Why
		pct  int
		frac float64
	}
	var parts []part
	left := 100
	for _, w := range slices.Sorted(maps.Keys(secs)) {
		if !(secs[w] > 0) {
			continue
		}
		exact := 100 * secs[w] / total
		p := part{why: w, pct: int(math.Floor(exact))}
		p.frac = exact - float64(p.pct)
		left -= p.pct
		parts = append(parts, p)
	}
	// The points left go to the largest remainders (ties by why).
	byFrac := make([]int, len(parts))
	for i := range byFrac {
		byFrac[i] = i
	}
	slices.SortStableFunc(byFrac, func(a, b int) int { return cmp.Compare(parts[b].frac, parts[a].frac) })
	for _, i := range byFrac[:min(left, len(byFrac))] {
		parts[i].pct++
	}
	var out []WhyShare
	for _, p := range parts {
		if p.pct > 0 {
			out = append(out, WhyShare{Why: p.why, Percent: p.pct})
		}
	}
	slices.SortStableFunc(out, func(a, b WhyShare) int { return cmp.Compare(b.Percent, a.Percent) })
	return out
}

// WhySlow sums up seconds per why in a line: "ran 4m10s: 12 % at full
// rate, 81 % limited by foreground_latency, 7 % slow start", the time
// being the seconds' sum. It is deterministic: the same seconds give the
// same line.
func WhySlow(secs map[Why]float64) string {
	d := time.Duration(totalSeconds(secs) * float64(time.Second))
	if d >= time.Second {
		d = d.Round(time.Second)
	} else {
		d = d.Round(time.Millisecond)
	}
	shares := Shares(secs)
	if len(shares) == 0 {
		return fmt.Sprintf("ran %s", d)
	}
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = fmt.Sprintf("%d %% %s", s.Percent, s.Why.Phrase())
	}
	return fmt.Sprintf("ran %s: %s", d, strings.Join(parts, ", "))
}

// totalSeconds is the sum of the positive seconds in secs.
func totalSeconds(secs map[Why]float64) float64 {
	total := 0.0
	for _, s := range secs {
		if s > 0 {
			total += s
		}
	}
	return total
}
