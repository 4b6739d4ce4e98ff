package pgcluster_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// TestPgBouncerStartsInFrontOfThePrimaryAndStops starts a pair and a
// PgBouncer in front of its primary, and checks what the harness
// promises: clients reach the primary through the pool as themselves, the
// passwords are real, the monitoring role reads the admin console, and
// after Stop the port is closed, the directory gone, and the primary has
// ended the backends of its server connections.
func TestPgBouncerStartsInFrontOfThePrimaryAndStops(t *testing.T) {
	ctx, c := startPair(t)
	b, err := c.StartPgBouncer(ctx, pgcluster.PgBouncerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if b.Port == 0 || b.Port == 6432 || b.Port == c.Primary.Port || b.PoolSize != pgcluster.DefaultPgBouncerPoolSize {
		t.Fatalf("pgbouncer on port %d with pool size %d", b.Port, b.PoolSize)
	}

	// Through the pool, as the plain role, on the primary.
	conn, err := b.Connect(ctx, pgcluster.RolePlain)
	if err != nil {
		t.Fatal(err)
	}
	var user string
	var port, backend int
	if err := conn.QueryRow(ctx, "SELECT current_user::text, current_setting('port')::int, pg_backend_pid()").Scan(&user, &port, &backend); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if user != pgcluster.RolePlain || port != c.Primary.Port {
		t.Fatalf("through the pool: user %q on port %d; want %q on %d", user, port, pgcluster.RolePlain, c.Primary.Port)
	}

	// A wrong password is refused by PgBouncer itself.
	bad := strings.Replace(b.DSN(pgcluster.RolePlain), c.Password(pgcluster.RolePlain), "wrong", 1)
	if closer, err := pgconnect(ctx, bad); err == nil {
		closer()
		t.Fatal("connected through pgbouncer with a wrong password")
	}

	// The monitoring role (stats_users) reads the admin console; the
	// plain role may not log in to it.
	admin, err := pgx.Connect(ctx, b.AdminDSN(pgcluster.RoleMonitor))
	if err != nil {
		t.Fatalf("admin console as %s: %v", pgcluster.RoleMonitor, err)
	}
	rows, err := admin.Query(ctx, "SHOW POOLS")
	if err != nil {
		t.Fatal(err)
	}
	pools, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	if !hasPool(pools, pgcluster.PgBouncerDatabase, pgcluster.RolePlain) {
		t.Fatalf("SHOW POOLS has no pool %s/%s: %v", pgcluster.PgBouncerDatabase, pgcluster.RolePlain, pools)
	}
	if closer, err := pgconnect(ctx, b.AdminDSN(pgcluster.RolePlain)); err == nil {
		closer()
		t.Fatalf("%s, in neither admin_users nor stats_users, logged in to the admin console", pgcluster.RolePlain)
	}

	// Connected before Stop, so the check below runs the moment it returns.
	primary, err := c.Primary.Connect(ctx, pgcluster.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close(context.Background())
	b.Stop()
	b.Stop() // twice is safe
	if b.Running() {
		t.Fatal("pgbouncer still running after Stop")
	}
	if d, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)), time.Second); err == nil {
		d.Close()
		t.Fatalf("port %d still accepts connections after Stop", b.Port)
	}
	var left int
	if err := primary.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", backend).Scan(&left); err != nil || left != 0 {
		t.Fatalf("backend %d of the pool's server connection still on the primary after Stop (%d, %v)", backend, left, err)
	}
	matches, _ := os.ReadDir(os.TempDir())
	for _, m := range matches {
		if strings.HasPrefix(m.Name(), "throttled-pgbouncer-") {
			// Another test's PgBouncer may run concurrently in another
			// package; only a directory holding this one's port is a leak.
			ini, err := os.ReadFile(os.TempDir() + "/" + m.Name() + "/pgbouncer.ini")
			if err == nil && strings.Contains(string(ini), "listen_port = "+strconv.Itoa(b.Port)+"\n") {
				t.Errorf("directory %s left behind", m.Name())
			}
		}
	}
}

func hasPool(pools []map[string]any, db, user string) bool {
	for _, p := range pools {
		if p["database"] == db && p["user"] == user {
			return true
		}
	}
	return false
}

// A PgBouncer that cannot start (a configuration it refuses) fails as
// soon as it exits, with its log, rather than waiting out the start
// timeout or hanging.
func TestPgBouncerThatCannotStartFailsBounded(t *testing.T) {
	ctx, c := startPair(t)
	start := time.Now()
	b, err := c.StartPgBouncer(ctx, pgcluster.PgBouncerOptions{
		Config:       []string{"pool_mode = no_such_mode"},
		StartTimeout: 30 * time.Second,
	})
	if err == nil {
		b.Stop()
		t.Fatal("a PgBouncer with pool_mode = no_such_mode started")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("failed start took %s", d)
	}
	if !strings.Contains(err.Error(), "exited before it answered") || !strings.Contains(err.Error(), "pool_mode") {
		t.Fatalf("error %v; want the exit and the log's complaint about pool_mode", err)
	}
	if errors.Is(err, pgcluster.ErrNoPgBouncer) {
		t.Fatal(err)
	}
}
