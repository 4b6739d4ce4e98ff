// Package pgtest shares one throwaway PostgreSQL primary and streaming
// replica (internal/testenv/pgcluster) between the tests of a package:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		c := pgtest.Cluster(t)
//		...
//	}
//
// The pair is started by the first test that asks for it and removed
// after the package's tests. Tests that inject a fault undo it with t.Cleanup, so the next test
// finds the pair healthy (Cluster checks that it is).
package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

var (
	once     sync.Once
	shared   *pgcluster.Cluster
	startErr error
)

// Main runs the package's tests and then removes the pair, if a test
// started it. The pair starts with the first test that asks for it, so a
// fuzz worker or a run of pure tests starts none.
func Main(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

// Cluster returns the package's pair, starting it on first use, after
// making sure it is whole: the primary answering and the replica streaming
// (a previous test may have stopped it and failed before its cleanup). A
// pair that cannot start fails the test: a run that skipped every
// database test would prove nothing.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared, startErr = pgcluster.Start(ctx, pgcluster.Options{Log: func(f string, a ...any) {
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, f+"\n", a...)
			}
		}})
	})
	if startErr != nil {
		t.Fatalf("pgtest: %v", startErr)
	}
	shared.ResumePrimary()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := shared.StartReplica(ctx); err != nil {
		t.Fatalf("pgtest: start replica: %v", err)
	}
	if err := shared.ResumeReplay(ctx); err != nil {
		t.Fatalf("pgtest: resume replay: %v", err)
	}
	forgetLeader(ctx, t)
	return shared
}

// forgetLeader removes the decision the previous test's leader published,
// so a test's first leader starts cold, as on a fresh cluster, rather than
// from a quarter of whatever budget the last test left behind. Tests of a
// takeover make theirs within the test.
func forgetLeader(ctx context.Context, t testing.TB) {
	t.Helper()
	conn, err := pgx.Connect(ctx, shared.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if err := ForgetLeader(ctx, conn); err != nil {
		t.Fatalf("pgtest: forget the last leader's decision: %v", err)
	}
}

// ForgetLeader empties throttled.leader and throttled.grants, where they
// exist: the next leader starts cold, and no sidecar finds tokens out, as
// on a fresh cluster.
func ForgetLeader(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `DO $$ BEGIN
		IF to_regclass('throttled.leader') IS NOT NULL THEN DELETE FROM throttled.leader; END IF;
		IF to_regclass('throttled.grants') IS NOT NULL THEN DELETE FROM throttled.grants; END IF; END $$`)
	return err
}

// Connect opens a connection to s as role, closed when the test ends.
func Connect(t testing.TB, s *pgcluster.Server, role string) *pgx.Conn {
	t.Helper()
	conn, err := s.Connect(context.Background(), role)
	if err != nil {
		t.Fatalf("pgtest: connect to %s as %s: %v", s.Name, role, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Eventually polls check every 50 ms until it returns nil or timeout
// passes, then fails the test with check's last error. It is how tests
// wait for the database.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	err := pgcluster.Poll(ctx, 50*time.Millisecond, func() (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("not true within %s: %v", timeout, last)
	}
}

// Steady checks cond every 50 ms for d and fails the test the first time
// it does not hold: how tests show that something does not happen (no
// batch while paused) without sleeping.
func Steady(t testing.TB, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := cond(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}
