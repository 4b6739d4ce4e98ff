package main

import (
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/throttle/hold"
)

func TestReloadRefusesRestartOnlyChangesNamingThem(t *testing.T) {
	base := config.Config{Listen: "127.0.0.1:8080", MaxConcurrent: 64, PrimaryDSN: "host=a", Cores: 8,
		ReplicaDSNs: map[string]string{"r1": "host=r1"}, HoldTTL: hold.TTLPolicy{Default: time.Hour, Max: 24 * time.Hour}, Cluster: "orders",
		Jobs: []config.Job{{Name: "purge", Weight: 1}}}
	same := base
	same.Jobs = []config.Job{{Name: "purge", Weight: 3}, {Name: "archive", Weight: 1}}
	same.MaxBudget = 40
	if err := restartOnly(&base, &same); err != nil {
		t.Fatalf("jobs and budget are reloadable: %v", err)
	}
	for _, tc := range []struct {
		edit func(*config.Config)
		want string
	}{
		{func(c *config.Config) { c.Listen = "127.0.0.1:9090" }, "listen address"},
		{func(c *config.Config) { c.TLSCert = "/etc/cert.pem" }, "tls_cert/tls_key"},
		{func(c *config.Config) { c.MaxConcurrent = 8 }, "max_concurrent_requests"},
		{func(c *config.Config) { c.PrimaryDSN = "host=b" }, "primary dsn"},
		{func(c *config.Config) { c.CoordinationDSN = "host=c" }, "coordination_dsn"},
		{func(c *config.Config) { c.Cores = 16 }, "cores"},
		{func(c *config.Config) { c.ReplicaDSNs = map[string]string{"r2": "host=r2"} }, "replica dsns"},
		{func(c *config.Config) { c.HoldTTL.Max = time.Hour }, "holds default_ttl/max_ttl"},
		{func(c *config.Config) { c.Cluster = "billing" }, "cluster"},
	} {
		next := base
		tc.edit(&next)
		err := restartOnly(&base, &next)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "restart") {
			t.Errorf("changing %s: %v", tc.want, err)
		}
	}
}
