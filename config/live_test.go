package config

import (
	"context"
	"strings"
	"testing"

	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestLiveRefusesAReplicaThatDoesNotExist(t *testing.T) {
	c := pgtest.Cluster(t)
	get := func(k string) string {
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
		if k == "THROTTLED_PRIMARY_DSN" {
			return c.Replica.DSN(pgcluster.RoleMonitor)
		}
		return getenv(k)
	})
	if err := atReplica.Live(context.Background()); err == nil || !strings.Contains(err.Error(), "in recovery") {
		t.Fatalf("primary DSN at the replica: %v", err)
	}
}
