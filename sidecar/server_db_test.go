package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func configWith(version string, js ...config.Job) *config.Config {
	return &config.Config{Version: version, MaxConcurrent: 8, OpenReads: true, Jobs: js}
}

// coordinatedClient opens a coordinated client on the package's pair,
// closed at the end of the test, and returns it with the admin DSN of its
// coordination database.
func coordinatedClient(t testing.TB) (*throttled.Client, string) {
	t.Helper()
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := c.Primary.DSN(pgcluster.RoleAdmin)
	client, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: admin, Coordinate: true, Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, admin
}

// coordinatedServer runs a sidecar in coordinated mode on a fresh cluster,
// with one job, a, capped at 10/s. It returns an admin pool on the
// coordination database.
func coordinatedServer(t *testing.T) (*sidecar.Server, *pgxpool.Pool, *httptest.Server) {
	t.Helper()
	ctx := context.Background()
	client, admin := coordinatedClient(t)
	srv, err := sidecar.New(client, configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: 10}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return srv, db, hs
}

func checkStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// /check answers from memory: a reload that waits on a slow coordination
// database does not stall the workers asking whether they may run.
func TestCheckDoesNotWaitOnTheDatabaseDuringReload(t *testing.T) {
	srv, db, hs := coordinatedServer(t)
	ctx := context.Background()
	pgtest.Eventually(t, 15*time.Second, func() error {
		if code := checkStatus(t, hs.URL+"/check/a"); code != http.StatusOK {
			return fmt.Errorf("/check/a = %d before the reload", code)
		}
		return nil
	})
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE throttled.workers IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	applied := make(chan error, 1)
	go func() {
		applied <- srv.Apply(configWith("v2", config.Job{Name: "a", Weight: 1, MaxRate: 10}, config.Job{Name: "b", Weight: 1}))
	}()
	// Wait until the reload (or a heartbeat) is blocked on the lock.
	pgtest.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%throttled.workers%'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("nothing waits on the workers table yet")
		}
		return nil
	})
	// A /check that waited on the database would wait for as long as
	// this test holds the lock, which is until the check has answered:
	// it would run out the client's 10 s. The 2 s bound leaves a loaded
	// machine room and still tells the two apart.
	start := time.Now()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(hs.URL + "/check/a")
	if err != nil {
		t.Fatalf("/check/a while a reload waited on the database: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		t.Errorf("/check/a = %d during the reload", resp.StatusCode)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("/check took %s while a reload waited on the database", d)
	}
	tx.Rollback(ctx)
	select {
	case err := <-applied:
		if err != nil {
			t.Errorf("reload after the lock was released: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reload never finished after the lock was released")
	}
	if code := checkStatus(t, hs.URL+"/check/b"); code == http.StatusNotFound {
		t.Error("job b, added by the reload, is unknown")
	}
}

// A reload that changes an existing job's limits takes effect in the
// coordination table, and one that drops a job removes it.
func TestReloadChangesAndRemovesExistingJobs(t *testing.T) {
	srv, db, hs := coordinatedServer(t)
	ctx := context.Background()
	if err := srv.Apply(configWith("v2", config.Job{Name: "a", Weight: 1, MaxRate: 1})); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		var maxRate float64
		if err := db.QueryRow(ctx, "SELECT max(max_rate) FROM throttled.workers WHERE job = 'a'").Scan(&maxRate); err != nil {
			return err
		}
		if maxRate != 1 {
			return fmt.Errorf("max_rate = %v; want 1", maxRate)
		}
		return nil
	})
	if err := srv.Apply(configWith("v3")); err != nil {
		t.Fatal(err)
	}
	if code := checkStatus(t, hs.URL+"/check/a"); code != http.StatusNotFound {
		t.Errorf("/check of a job the reload removed = %d; want 404", code)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		var n int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM throttled.workers WHERE job = 'a'").Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d worker rows for the removed job", n)
		}
		return nil
	})
}

// Ready means the check can answer. /check once said 500 "allocation lease
// expired" for about a second after /readyz said 200: ready did not wait
// for the job's first allocation.
func TestCheckAnswersOnceReady(t *testing.T) {
	_, _, hs := coordinatedServer(t)
	waitReady(t, hs.URL)
	for i := range 20 {
		if code := checkStatus(t, hs.URL+"/check/a"); code >= 500 {
			t.Fatalf("check %d after /readyz said 200: %d", i, code)
		}
	}
}
