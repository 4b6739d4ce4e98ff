package main

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// windowAudit writes to the audit log each time a window starts or stops
// holding a job, as the leader's decisions show it: the windows' holds are
// made by every process's clock and never stored, so the log is where a
// person later reads when a job was kept out of its window.
type windowAudit struct {
	audit   *holds.AuditLog
	leading func() bool
	log     hclog.Logger
	// active maps each job and window hold in force to its reason; nil
	// before the first decision.
	active map[windowHold]string
}

type windowHold struct{ job, id string }

func (a *windowAudit) decision(ctx context.Context, d throttle.Decision) {
	if a.audit == nil || !a.leading() {
		return
	}
	now := map[windowHold]string{}
	for j, jd := range d.Jobs {
		for _, h := range jd.Holds {
			if h.Source == hold.SourceWindow {
				now[windowHold{string(j), h.ID}] = h.Reason
			}
		}
	}
	if a.active == nil { // the first decision: what holds now is no change
		a.active = now
		return
	}
	for _, k := range sortedHolds(now) {
		if _, was := a.active[k]; !was {
			a.write(ctx, "window_hold", now[k], k.job)
		}
	}
	for _, k := range sortedHolds(a.active) {
		if _, is := now[k]; !is {
			a.write(ctx, "window_release", "the window's hold ended: "+a.active[k], k.job)
		}
	}
	a.active = now
}

func sortedHolds(m map[windowHold]string) []windowHold {
	return slices.SortedFunc(maps.Keys(m), func(a, b windowHold) int {
		return cmp.Or(strings.Compare(a.job, b.job), strings.Compare(a.id, b.id))
	})
}

func (a *windowAudit) write(ctx context.Context, event, reason, job string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.audit.Append(ctx, holds.Entry{Event: event, Actor: "throttled", Source: string(hold.SourceWindow), Reason: reason,
		Detail: map[string]any{"job": job}}); err != nil {
		a.log.Warn("cannot audit a window's hold", "event", event, "job", job, "error", err)
	}
}
