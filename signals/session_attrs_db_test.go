package signals

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// multiHost is the monitor role's DSN listing the replica's host, then the
// primary's, as one multi-host URL with target_session_attrs=tsa.
func multiHost(c *pgcluster.Cluster, first, second *pgcluster.Server, tsa string) string {
	u, _ := url.Parse(first.DSN(pgcluster.RoleMonitor))
	s, _ := url.Parse(second.DSN(pgcluster.RoleMonitor))
	u.Host += "," + s.Host
	q := u.Query()
	q.Set("target_session_attrs", tsa)
	u.RawQuery = q.Encode()
	return u.String()
}

// The sampler takes the primary's DSN as libpq users write it: several
// hosts, the primary not first, target_session_attrs read-write or
// primary; and any with the primary first. It finds the primary, though
// its own sessions are read-only, and samples it; a replica DSN that
// asks for read-only or standby finds the replica.
func TestMultiHostDSNsFindThePrimary(t *testing.T) {
	c := pgtest.Cluster(t)
	for _, tc := range []struct{ name, dsn string }{
		{"read-write", multiHost(c, c.Replica, c.Primary, "read-write")},
		{"primary", multiHost(c, c.Replica, c.Primary, "primary")},
		{"any, primary first", multiHost(c, c.Primary, c.Replica, "any")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Config{PrimaryDSN: tc.dsn, ReplicaDSNs: []string{multiHost(c, c.Primary, c.Replica, "standby")}, Cores: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := p.Connect(ctx); err != nil {
				t.Fatalf("Connect: %v", err)
			}
			p.Tick(ctx)
			s, ok := p.Snapshot().Get(PrimaryLoad, nil)
			if !ok || s.Err != nil {
				t.Fatalf("primary_load %+v, %v; want a reading of the primary", s, ok)
			}
			if r, ok := p.Snapshot().Get(ReplicaReplayPaused, replicaLabels(pgcluster.ReplicaName)); !ok || r.Err != nil {
				t.Errorf("the replica by its multi-host DSN: %+v, %v", r, ok)
			}
		})
	}
	// any with the replica first reaches the replica, which the primary
	// sampler refuses by kind, at start and with the reason.
	p, err := New(Config{PrimaryDSN: multiHost(c, c.Replica, c.Primary, "any"), Cores: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Connect(ctx); err == nil || !strings.Contains(fmt.Sprint(err), "recovery") {
		t.Errorf("any, the replica first: Connect %v; want it refused as a server in recovery", err)
	}
}
