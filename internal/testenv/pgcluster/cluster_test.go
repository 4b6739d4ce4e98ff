package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// TestStartStopLeavesNothingBehind starts a pair of its own and checks
// what the harness promises: loopback ports off 5432, servers not running
// as root, SCRAM passwords required, and after Stop no directory and no
// process left.
func TestStartStopLeavesNothingBehind(t *testing.T) {
	ctx, c := startPair(t)
	for _, s := range []*pgcluster.Server{c.Primary, c.Replica} {
		if s.Port == 5432 || s.Port == 0 {
			t.Errorf("%s on port %d", s.Name, s.Port)
		}
		fi, err := os.Stat(s.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid == 0 {
			t.Errorf("%s data directory owned by root", s.Name)
		}
	}
	// A wrong password is refused: the DSNs' secrets are real.
	bad := strings.Replace(c.Primary.DSN(pgcluster.RoleMonitor), c.Password(pgcluster.RoleMonitor), "wrong", 1)
	if conn, err := pgconnect(ctx, bad); err == nil {
		conn()
		t.Fatal("connected with a wrong password")
	}
	conn, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	rows.Close()
	conn.Close(ctx)
	if len(pids) < 3 {
		t.Fatalf("only %d server processes seen", len(pids))
	}
	dir := c.Dir()
	c.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s still exists: %v", dir, err)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("server process %d still running after Stop", pid)
		}
	}
}

// TestCPULoadDoesNotPinTheHorizon checks that CPU load sessions take CPU
// without holding the xmin horizon: transactions committed while they spin
// leave the horizon behind them. One statement spinning for the whole load
// pinned it, so the foreground's updates walked ever longer version chains
// and its cost grew over a replay's run.
func TestCPULoadDoesNotPinTheHorizon(t *testing.T) {
	ctx, c := startPair(t)
	load, err := c.CPULoad(ctx, 2, time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	defer load.Stop()
	conn, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var first int64
	if err := conn.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&first); err != nil {
		t.Fatal(err)
	}
	// Poll until no load session's snapshot is older than first: with
	// short statements that happens within one slice.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var oldest *int64
		err := conn.QueryRow(ctx, `SELECT min(backend_xmin::text::bigint) FROM pg_stat_activity WHERE application_name = $1`,
			pgcluster.CPUAppName).Scan(&oldest)
		if err != nil {
			t.Fatal(err)
		}
		if oldest == nil || *oldest > first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a CPU load session still holds xmin %d, older than transaction %d committed since", *oldest, first)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil { // one more transaction to see past
			t.Fatal(err)
		}
	}
	var active int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'`,
		pgcluster.CPUAppName).Scan(&active); err != nil {
		t.Fatal(err)
	}
	if active == 0 {
		t.Fatal("no CPU load session active")
	}
	if err := load.Stop(); err != nil {
		t.Fatal(err)
	}
}
