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

	"github.com/throttled/throttled/internal/pgcluster"
)

// TestStartStopLeavesNothingBehind starts a pair of its own and checks
// what the harness promises: loopback ports off 5432, servers not running
// as root, SCRAM passwords required, and after Stop no directory and no
// process left.
func TestStartStopLeavesNothingBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
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
