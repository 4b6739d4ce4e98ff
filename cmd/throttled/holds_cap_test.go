package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
)

// Failure 8: `throttled pause --ttl 72h --max-ttl 100h` made a 72-hour
// hold, because the cap came from the caller's own flag. The cap is the
// cluster's: `throttled run` writes its file's holds.max_ttl (2h here)
// into the database, which refuses a longer hold from every client: the
// CLI, the API, the library with a larger maximum of its own, and plain
// SQL as the coordination role. Nothing is written. A cap changed behind
// the sidecar's back is put back by its next applied reload.
func TestHoldCapCannotBeRaisedByAnyClient(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	dsn := c.Primary.DSN(pgcluster.RoleAdmin) // the config's coordination_dsn
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := holds.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	db, err := holds.New(pool, holds.Config{TTL: hold.TTLPolicy{Max: 100 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Holds().SetTTL(ctx, hold.TTLPolicy{}, "test", hold.SourceManual, "test done"); err != nil {
			t.Errorf("put the cluster's cap back: %v", err)
		}
	})

	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	t.Setenv("THROTTLED_TEST_TOKEN_VIEWER", viewerToken)
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
	addr := freeAddr(t)
	path := t.TempDir() + "/throttled.hcl"
	writeConfig(t, path, c, addr, "replica1", "holds {\n  max_ttl = \"2h\"\n}\n")
	rctx, cancel := context.WithCancel(ctx)
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(rctx, []string{"run", "--config", path, "--log-level", "warn"}, &out, &errOut) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("run exit %d: %s", code, errOut.String())
			}
		case <-time.After(20 * time.Second):
			t.Error("run did not stop within 20 s")
		}
	})
	a := sidecarAPI{t: t, base: "http://" + addr}
	waitReady(t, a.base, 20*time.Second)
	if got, err := db.Holds().ClusterTTL(ctx); err != nil || got.Max != 2*time.Hour {
		t.Fatalf("the cluster's cap after throttled run started: %+v, %v; want its file's 2h", got, err)
	}
	var start time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&start); err != nil {
		t.Fatal(err)
	}

	// The CLI: no flag raises the cap, and the cluster's applies.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ttl", "72h", "--max-ttl", "100h"}, "unknown flag --max-ttl"},
		{[]string{"--ttl", "72h"}, "TTL 72h0m0s exceeds the maximum 2h0m0s"},
		{[]string{"--ttl", "3h"}, "TTL 3h0m0s exceeds the maximum 2h0m0s"},
	} {
		var o, e bytes.Buffer
		args := append([]string{"pause", "--primary-dsn", dsn, "--job", "purge", "--reason", "long", "--actor", "mallory"}, tc.args...)
		if code := run(ctx, args, &o, &e); code != exitUsage || !strings.Contains(e.String(), tc.want) {
			t.Errorf("CLI %v: exit %d: %s%s; want refused: %q", tc.args, code, o.String(), e.String(), tc.want)
		}
	}
	// The API.
	for _, ttl := range []string{"72h", "3h"} {
		if code, body, _ := a.do("POST", "/v1/holds", opsToken, api.PauseRequest{Scope: "job:purge", TTL: ttl, Reason: "long"}); code != 400 {
			t.Errorf("POST /v1/holds ttl %s: %d %v; want 400", ttl, code, body)
		}
	}
	// The library, with a maximum of its own above the cluster's.
	_, err = db.Holds().Add(ctx, hold.Request{Scope: hold.OneJob("purge"), Source: hold.SourceManual, Reason: "long", Actor: "mallory", TTL: 72 * time.Hour})
	if !errors.Is(err, hold.ErrInvalid) || !strings.Contains(err.Error(), "TTL 72h0m0s exceeds the maximum 2h0m0s") {
		t.Errorf("library (Config.MaxTTL 100h), TTL 72h: %v; want refused naming both", err)
	}
	// Plain SQL as the coordination role.
	_, err = pool.Exec(ctx, `INSERT INTO throttled.holds (scope_kind, scope_value, source, reason, actor, expires_at)
		VALUES ('job', 'purge', 'manual', 'by hand', 'mallory', now() + interval '72 hours')`)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "TH001" {
		t.Errorf("SQL INSERT of a 72h hold: %v; want refused (TH001)", err)
	}
	var written, created int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM throttled.holds WHERE created_at >= $1),
		(SELECT count(*) FROM throttled.audit WHERE at >= $1 AND event = 'hold_created')`, start).Scan(&written, &created); err != nil {
		t.Fatal(err)
	}
	if written != 0 || created != 0 {
		t.Fatalf("%d holds and %d hold_created lines written; want none", written, created)
	}

	// Raised by SQL behind the sidecar's back (audited), the cap is put
	// back by the next applied reload.
	if _, err := pool.Exec(ctx, "UPDATE throttled.settings SET max_hold_ttl = '100 hours'"); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := a.do("POST", "/v1/reload", opsToken, nil); code != 200 || body["applied"] != true {
		t.Fatalf("reload: %d %v", code, body)
	}
	if got, err := db.Holds().ClusterTTL(ctx); err != nil || got.Max != 2*time.Hour {
		t.Fatalf("the cluster's cap after a reload: %+v, %v; want the file's 2h back", got, err)
	}
	es, err := db.Audit().Since(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, e := range es {
		if e.Event == holds.EventMaxTTL {
			changes = append(changes, e.Actor+"/"+e.Source+":"+e.Detail["new"].(string))
		}
	}
	if len(changes) != 2 || !strings.HasPrefix(changes[0], "postgres/sql:100:00:00") || changes[1] != "throttled/auto:02:00:00" {
		t.Fatalf("cap changes audited: %v; want the SQL raise, then throttled's repair", changes)
	}
}
