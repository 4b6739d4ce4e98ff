package config

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// runnable is the smallest configuration with a coordination role that
// may write schema throttled: run refuses the sampler's pg_monitor role
// there.
var runnable = strings.Replace(smallest, "  cores = 2\n", "  cores = 2\n  coordination_dsn = env(\"THROTTLED_COORDINATION_DSN\")\n", 1)

func TestLiveRefusesAReplicaThatDoesNotExist(t *testing.T) {
	c := pgtest.Cluster(t)
	smallest := runnable
	get := func(k string) string {
		if k == "THROTTLED_COORDINATION_DSN" {
			return c.Primary.DSN(pgcluster.RoleAdmin)
		}
		if k == "THROTTLED_PRIMARY_DSN" {
			return c.Primary.DSN(pgcluster.RoleMonitor)
		}
		return getenv(k)
	}
	good, err := Parse("throttled.hcl", []byte(smallest), get)
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Live(context.Background()); err != nil {
		t.Fatalf("replica1 exists: %v", err)
	}
	bad, err := Parse("throttled.hcl", []byte(strings.Replace(smallest, `"replica1"`, `"db-retired"`, 1)), get)
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Live(context.Background())
	if err == nil || !strings.Contains(err.Error(), `replica "db-retired" does not exist`) || !strings.Contains(err.Error(), "replica1") {
		t.Fatalf("retired replica: %v", err)
	}
	atReplica, _ := Parse("throttled.hcl", []byte(smallest), func(k string) string {
		if k == "THROTTLED_COORDINATION_DSN" {
			return c.Primary.DSN(pgcluster.RoleAdmin)
		}
		if k == "THROTTLED_PRIMARY_DSN" {
			return c.Replica.DSN(pgcluster.RoleMonitor)
		}
		return getenv(k)
	})
	if err := atReplica.Live(context.Background()); err == nil || !strings.Contains(err.Error(), "in recovery") {
		t.Fatalf("primary DSN at the replica: %v", err)
	}
}

// check-config --live used to accept any replica DSN without connecting
// to it, while run refused the file at start: a replica DSN that reaches
// nothing, one that points at the primary, and one that reaches a replica
// other than the one its block names (its samples would be labelled with
// another name) are each refused at the replica block's line.
func TestLiveChecksEveryReplicaDSN(t *testing.T) {
	c := pgtest.Cluster(t)
	smallest := runnable
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	// A second physical slot, so that a block named "spare" exists on the
	// primary while no server is that replica.
	if _, err := admin.Exec(context.Background(), "SELECT pg_create_physical_replication_slot('spare')"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "SELECT pg_drop_replication_slot('spare')") })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	withReplica := func(name, dsn string) string {
		return strings.Replace(smallest, "replica \"replica1\" {\n", fmt.Sprintf("replica %q {\n  dsn = %q\n", name, dsn), 1)
	}
	get := func(k string) string {
		if k == "THROTTLED_COORDINATION_DSN" {
			return c.Primary.DSN(pgcluster.RoleAdmin)
		}
		if k == "THROTTLED_PRIMARY_DSN" {
			return c.Primary.DSN(pgcluster.RoleMonitor)
		}
		return getenv(k)
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"the replica", withReplica("replica1", c.Replica.DSN(pgcluster.RoleMonitor)), ""},
		{"the primary", withReplica("replica1", c.Primary.DSN(pgcluster.RoleMonitor)),
			`config: throttled.hcl:6: replica "replica1": dsn: signals: wrong kind of server: a replica DSN points at 127.0.0.1:`},
		{"unreachable", withReplica("replica1", fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", pgcluster.RoleMonitor, closedPort)),
			fmt.Sprintf(`config: throttled.hcl:6: replica "replica1": dsn: signals: server unreachable: connect to replica 127.0.0.1:%d`, closedPort)},
		{"another replica", withReplica("spare", c.Replica.DSN(pgcluster.RoleMonitor)),
			`config: throttled.hcl:6: replica "spare": dsn reaches the replica named "replica1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("throttled.hcl", []byte(tc.src), get)
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Live(context.Background())
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused the replica's own DSN: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Live: %v\nwant %q", err, tc.want)
			}
			if strings.Contains(err.Error(), c.Password(pgcluster.RoleMonitor)) {
				t.Fatal("the error shows the DSN's password")
			}
		})
	}
}

// The primary DSN is checked as the sampler will connect: check-config
// --live once said "valid" for a superuser DSN, or a role without
// pg_monitor, that run then refused.
func TestLiveChecksThePrimaryRoleAsTheSamplerWill(t *testing.T) {
	c := pgtest.Cluster(t)
	smallest := runnable
	for _, tc := range []struct {
		role, want string
	}{
		{pgcluster.RoleAdmin, "superuser"},
		{pgcluster.RolePlain, "GRANT pg_monitor"},
	} {
		cfg, err := Parse("throttled.hcl", []byte(smallest), func(k string) string {
			if k == "THROTTLED_COORDINATION_DSN" {
				return c.Primary.DSN(pgcluster.RoleAdmin)
			}
			if k == "THROTTLED_PRIMARY_DSN" {
				return c.Primary.DSN(tc.role)
			}
			return getenv(k)
		})
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Live(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "throttled.hcl:1") {
			t.Errorf("primary as %s: %v; want refused at throttled.hcl:1 naming %q", tc.role, err, tc.want)
		}
	}
}

// check-config --live once passed a custom signal reading NaN, which then
// blanked /v1/status under run: a reading that is not a finite number is
// refused at the block's file:line, as the sampler refuses it at start.
// A query calling a function whose effect outlives the sample (a session
// advisory lock, a cancelled backend, a notification) is refused at load,
// naming the function, before anything connects.
func TestLiveRefusesNonFiniteAndLastingCustomSignals(t *testing.T) {
	c := pgtest.Cluster(t)
	smallest := runnable
	get := func(k string) string {
		if k == "THROTTLED_COORDINATION_DSN" {
			return c.Primary.DSN(pgcluster.RoleAdmin)
		}
		if k == "THROTTLED_PRIMARY_DSN" {
			return c.Primary.DSN(pgcluster.RoleMonitor)
		}
		return getenv(k)
	}
	block := func(name, query string) (string, string) {
		src := smallest + fmt.Sprintf("custom_signal %q {\n  query = %q\n}\n", name, query)
		return src, fmt.Sprintf("throttled.hcl:%d", strings.Count(smallest, "\n")+1)
	}
	for query, read := range map[string]string{"SELECT 'NaN'::float8": "NaN", "SELECT '-Infinity'::float8": "-Inf"} {
		src, at := block("nanval", query)
		cfg, err := Parse("throttled.hcl", []byte(src), get)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		err = cfg.Live(context.Background())
		if err == nil || !strings.Contains(err.Error(), `custom signal "nanval" (`+at) ||
			!strings.Contains(err.Error(), "read "+read+"; a custom signal must return a finite number") {
			t.Errorf("Live with %s: %v; want it refused at %s, saying it read %s", query, err, at, read)
		}
	}
	for query, fn := range map[string]string{
		"SELECT 1 FROM (SELECT pg_advisory_lock(777)) a":             "pg_advisory_lock",
		`SELECT 1 FROM (SELECT pg_catalog."pg_advisory_lock" (1)) a`: "pg_advisory_lock",
		"SELECT pg_cancel_backend(pid)::int FROM pg_stat_activity":   "pg_cancel_backend",
		"SELECT 1 FROM (SELECT pg_notify('c', 'x')) a":               "pg_notify",
		"SELECT 1 FROM pg_sleep(2)":                                  "pg_sleep",
	} {
		src, at := block("effects", query)
		_, err := Parse("throttled.hcl", []byte(src), get)
		if err == nil || !strings.Contains(err.Error(), at) || !strings.Contains(err.Error(), fn+"(): refused") {
			t.Errorf("Parse with %s: %v; want it refused at %s, naming %s", query, err, at, fn)
		}
	}
}
