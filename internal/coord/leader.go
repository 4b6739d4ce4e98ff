package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/limit"
)

// leader.go: what the leader does: take over from the last leader's
// publication, decide every tick, publish every worker's lease, step down.

// becomeLeader starts sampling and a controller that starts cautious: a
// quarter of the last published budget.
func (e *Engine) becomeLeader(ctx context.Context) error {
	// The leader decides for the cluster on the holds every process
	// shares (Prepare sets them); a process's in-process holds pause only
	// its own jobs.
	ccfg := e.prepare(e.controller)
	// A recent publication is the cluster's budget a moment ago: start
	// cautious from it. An old one says nothing about now.
	// A critical pause the last leader was in goes on under this one: a
	// latched one whatever its age (only a person ends it), another if
	// recent.
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	prev, err := e.db().LastLeader(lctx)
	cancel()
	if err != nil {
		return err
	}
	// A new term, taken on the lock's own session: from now on a leader
	// before this one, revived, publishes nothing.
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	e.term, err = store.New(e.election).TakeTerm(tctx, e.procID)
	cancel()
	if err != nil {
		return err
	}
	last := prev.Budget
	if !prev.Recent {
		last = 0
	}
	// The controller starts at a quarter of it, but never below
	// min(it, InitialBudget), and raises it to InitialBudget at once on a
	// healthy primary: leaders that follow each other within seconds cannot
	// ratchet the cluster's budget down by a quarter each (see
	// throttle.Config.PreviousBudget).
	ccfg.PreviousBudget = last
	if cs := prev.Critical; cs.Signal.Signal != "" && cs.Since != nil && (cs.Latched || prev.Recent) {
		in := &throttle.CriticalState{Signal: fromStore(cs.Signal), Since: *cs.Since, Latched: cs.Latched, Budget: cs.PauseBudget}
		if cs.Value != nil && cs.Threshold != nil {
			in.Value, in.Threshold = *cs.Value, *cs.Threshold
		}
		// The quiet the last leader saw counts on only if it published
		// a moment ago: a gap nobody watched is not quiet.
		if cs.QuietSince != nil && prev.Recent {
			in.QuietSince = *cs.QuietSince
		}
		ccfg.Inherited = in
		e.log.Warn("taking over a critical pause", "signal", cs.Signal, "since", *cs.Since, "latched", cs.Latched)
	}
	if e.ctl, err = throttle.New(ccfg); err != nil {
		return err
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stopPoller, e.pollerDone = stop, make(chan struct{})
	go func() {
		defer close(e.pollerDone)
		_ = e.poller.Run(pctx)
	}()
	e.leader, e.seen, e.known, e.lastLead, e.sampled = true, map[string][3]float64{}, map[status.Job]bool{}, time.Time{}, false
	e.tookOver = time.Now()
	e.isLeader.Store(true)
	e.log.Info("became leader", "worker", e.procID, "previous_budget", last, "term", e.term)
	return nil
}

func (e *Engine) stepDown(why string) {
	if !e.leader {
		return
	}
	e.stopPoller()
	<-e.pollerDone
	e.leader = false
	e.isLeader.Store(false)
	e.publishDenied.Store(nil)
	e.log.Warn("stepped down as leader", "why", why)
}

// lead decides for every live worker in the cluster and publishes the
// allocations with a lease. It does not decide before the sampler has a
// fresh reading of the primary.
func (e *Engine) lead(ctx context.Context) {
	snap := e.poller.Snapshot()
	// A new leader decides nothing before its first fresh sample of the
	// primary taken since it took over: the sampler keeps its last
	// readings across a step-down, and a reading under its max age from
	// before (of a primary since demoted, when this process is elected
	// again after a failover) says nothing of now. After that it decides
	// every tick, stale signals included: the controller then says stale
	// (audited, paged), pays nothing out, and restarts slowly when the
	// signals return.
	if s, ok := snap.Get(signals.PrimaryLoad, nil); ok && s.Err == nil && !snap.Stale(s) && s.At.After(e.tookOver) {
		e.sampled = true
	}
	if !e.sampled {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	live, err := e.db().LiveWorkers(lctx, e.lease)
	if err != nil {
		e.publishFailed("cannot read workers", e.denied(err))
		return
	}
	// Jobs are the union of the live workers' jobs; their consumption is
	// the growth of each worker's counters.
	byJob := map[status.Job][]store.Live{}
	for _, w := range live {
		j := status.Job(w.Job)
		byJob[j] = append(byJob[j], w)
		last, seen := e.seen[w.ID]
		e.seen[w.ID] = [3]float64{w.Batches, w.Errors, w.DurationMs}
		if seen && w.Batches >= last[0] {
			n := int(w.Batches - last[0])
			if n > 0 {
				e.work.report(time.Now())
			}
			e.ctl.ReportMany(j, n, int(w.Errors-last[1]), time.Duration((w.DurationMs-last[2])*float64(time.Millisecond)))
		}
		if w.Waiting {
			e.ctl.Wanted(j)
		}
	}
	for j, ws := range byJob {
		weight, minRate, maxRate := 0.0, 0.0, 0.0
		for _, w := range ws {
			weight, minRate, maxRate = max(weight, w.Weight), max(minRate, w.MinRate), max(maxRate, w.MaxRate)
		}
		tables, sigs := throttle.GateUnion(ws, func(w store.Live) ([]string, []string) { return w.Tables, w.Signals })
		if err := e.ctl.Register(throttle.JobConfig{Name: j, Weight: weight, MinRate: minRate, MaxRate: maxRate, Tables: tables, Signals: sigs}); err != nil {
			e.log.Warn("cannot register job", "job", j, "error", err)
		}
	}
	for j := range e.known {
		if _, ok := byJob[j]; !ok {
			e.ctl.Unregister(j)
			delete(e.known, j)
		}
	}
	for j := range byJob {
		e.known[j] = true
	}
	// Only a latched pause has a request to claim (RequestResume asks
	// only of a published latch, and publishing drops any other).
	if cs := e.ctl.Critical(); cs != nil && cs.Latched {
		e.claimResume(ctx, snap.At)
	}
	d := e.ctl.Step(snap.At, snap)
	e.published(d)
	pub := store.Publication{Leader: e.procID, Budget: d.Budget, Mode: string(d.Mode), Binding: toStore(d.Binding), Reason: d.Reason, Lease: e.lease, Term: e.term}
	for j, ws := range byJob {
		jd := d.Jobs[j]
		n := float64(len(ws))
		for _, w := range ws {
			a := limit.Allocation{}
			state, code, reason := jd.State, jd.Code, jd.Reason
			if jd.Rate > 0 {
				a = limit.Allocation{Rate: jd.Rate / n, Burst: int(math.Max(1, math.Ceil(float64(jd.Burst)/n))),
					MaxInFlight: int(math.Max(1, math.Ceil(float64(jd.MaxInFlight)/n)))}
				if a.Rate < status.SlowRate && jd.Rate >= status.SlowRate {
					// The job runs, but this worker's share of it is too
					// small to start a batch within a few seconds.
					state, code, reason = status.JobThrottled, status.CodeTooSlow, status.SlowReason(a.Rate, fmt.Sprintf("this worker's share of %d; %s", len(ws), d.Reason))
				}
			}
			pub.Workers = append(pub.Workers, store.WorkerLease{ID: w.ID, Rate: a.Rate, Burst: int32(a.Burst), InFlight: int32(a.MaxInFlight),
				State: string(state), Code: string(code), Reason: reason})
		}
	}
	if cs := e.ctl.Critical(); cs != nil {
		pub.Critical = store.Critical{Signal: toStore(cs.Signal), Since: &cs.Since, Latched: cs.Latched, PauseBudget: cs.Budget}
		if cs.Threshold != 0 {
			pub.Critical.Value, pub.Critical.Threshold = &cs.Value, &cs.Threshold
		}
		if !cs.QuietSince.IsZero() {
			pub.Critical.QuietSince = &cs.QuietSince
		}
	}
	// One transaction: the leases are renewed only together with the
	// decision they come from (what a new leader takes over, a critical
	// pause included), or not at all, and then every worker stops at the
	// end of its lease.
	if err := e.db().Publish(lctx, pub); err != nil {
		var fenced *store.FencedError
		if errors.As(err, &fenced) {
			// Another process leads since: this one's authority is
			// stale (it was frozen, or cut off, past its session).
			if e.election != nil {
				e.election.Close(context.WithoutCancel(ctx))
				e.election = nil
			}
			e.stepDown(err.Error())
			return
		}
		e.publishFailed("cannot publish allocations", e.denied(err))
		return
	}
	if e.publishDenied.Swap(nil) != nil {
		e.log.Info("allocations published again")
	}
	e.lastLead = time.Now()
}

// publishFailed logs a leader's failed publication. A refused one is
// logged once, as an error, until a publication succeeds; this process's
// workers give it as their reason when their leases lapse.
func (e *Engine) publishFailed(msg string, err error) {
	var perm *permissionError
	if !errors.As(err, &perm) {
		e.log.Warn(msg, "error", err)
		return
	}
	if e.publishDenied.Swap(perm) == nil {
		e.log.Error("leader may not publish; workers pause when their leases lapse, until the coordination role is granted what it lacks",
			"step", msg, "error", err)
	}
}

// claimResume takes a person's request to resume a latched critical
// pause, if one waits, and hands it to the controller.
func (e *Engine) claimResume(ctx context.Context, now time.Time) {
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	by, asked, err := e.db().ClaimResume(lctx)
	switch {
	case err != nil:
		e.log.Warn("cannot read resume requests", "error", e.denied(err))
	case !asked:
	case e.ctl.Resume(now, by):
		e.log.Warn("latched critical pause resumed", "by", by)
	default:
		e.log.Info("a resume request found no latched critical pause", "by", by)
	}
}

// toStore is b as the store keeps it: its signal's name and labels apart.
func toStore(b status.Binding) store.Binding {
	return store.Binding{Signal: string(b.Signal), Labels: b.Labels}
}

// fromStore is the binding the store kept; labels stored empty are nil,
// as the controller makes them for a signal without any.
func fromStore(b store.Binding) status.Binding {
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return status.Binding{Signal: signals.Name(b.Signal), Labels: b.Labels}
}
