package main

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/throttle"
)

// windowAudit writes to the audit log each time a window starts or stops
// holding a job, as the leader's decisions show it: the windows' holds are
// made by every process's clock and never stored, so the log is where a
// person later reads when a job was kept out of its window.
type windowAudit struct {
	store   *holds.Store
	leading func() bool
	log     hclog.Logger
	// active maps "job hold-id" to the reason it was held for.
	active map[string]string
}

func (a *windowAudit) decision(ctx context.Context, d throttle.Decision) {
	if a.store == nil || !a.leading() {
		return
	}
	now := map[string]string{}
	jobOf := map[string]string{}
	for j, jd := range d.Jobs {
		for _, h := range jd.Holds {
			if h.Source == throttle.SourceWindow {
				k := string(j) + " " + h.ID
				now[k], jobOf[k] = h.Reason, string(j)
			}
		}
	}
	if a.active == nil { // the first decision: what holds now is no change
		a.active = now
		return
	}
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if _, was := a.active[k]; !was {
			a.write(ctx, "window_hold", now[k], jobOf[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.active)) {
		if _, is := now[k]; !is {
			a.write(ctx, "window_release", "the window's hold ended: "+a.active[k], k[:indexSpace(k)])
		}
	}
	a.active = now
}

func indexSpace(s string) int {
	for i := range s {
		if s[i] == ' ' {
			return i
		}
	}
	return len(s)
}

func (a *windowAudit) write(ctx context.Context, event, reason, job string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.store.Audit(ctx, holds.Entry{Event: event, Actor: "throttled", Source: string(throttle.SourceWindow), Reason: reason,
		Detail: map[string]any{"job": job}}); err != nil {
		a.log.Warn("cannot audit a window's hold", "event", event, "job", job, "error", err)
	}
}
