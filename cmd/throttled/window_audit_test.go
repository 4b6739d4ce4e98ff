package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
	"github.com/throttled/throttled/throttle/hold"
)

// The leader writes each window hold's start and end to the audit log,
// once; what already holds at its first decision is no change; a process
// that does not lead writes nothing.
func TestWindowHoldsAreAuditedAtTheirEdges(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	db, err := openDB(ctx, c.Primary.DSN(pgcluster.RoleAdmin), holds.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pool := db.Pool()
	defer pool.Close()
	var since time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&since); err != nil {
		t.Fatal(err)
	}
	leading := true
	a := &windowAudit{audit: db.Audit(), leading: func() bool { return leading }, log: hclog.NewNullLogger()}
	window := hold.Hold{ID: "window:purge", Scope: hold.OneJob("purge"), Source: hold.SourceWindow, Reason: "outside its run window (01:00-06:00 UTC)"}
	held := throttle.Decision{Jobs: map[status.Job]throttle.JobDecision{"purge": {State: status.JobPaused, Code: status.CodeHeld, Holds: []hold.Hold{window}}}}
	free := throttle.Decision{Jobs: map[status.Job]throttle.JobDecision{"purge": {State: status.JobRunning, Code: status.CodeRunning}}}
	for _, d := range []throttle.Decision{free, held, held, free, free} {
		a.decision(ctx, d)
	}
	leading = false
	a.decision(ctx, held) // not the leader: nothing
	es, err := db.Audit().Since(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		if e.Source == string(hold.SourceWindow) {
			got = append(got, e.Event+" "+e.Detail["job"].(string))
		}
	}
	if want := []string{"window_hold purge", "window_release purge"}; !slices.Equal(got, want) {
		t.Errorf("audit %v; want %v", got, want)
	}
}
