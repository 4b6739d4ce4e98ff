package coord_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/internal/coord"
	"github.com/throttled/throttled/internal/testenv/clienttest"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// A coordination role refused a privilege: workers pause, and say which GRANT.

// A coordination role that loses write access to throttled's tables
// fails closed, and says it is a permission problem. Before, a heartbeat
// refused with SQLSTATE 42501 paused its worker "cannot reach the
// coordination database" and logged nothing; and a leader refused only on
// throttled.leader still renewed every worker's lease (the allocations
// were written by a statement of their own), so the workers ran on while
// the decision a new leader takes over from was never written. Now every
// worker pauses within the lease with a reason naming the missing GRANT,
// the log says the same, and the worker runs again once it is granted.
func TestCoordinationRoleWithoutWriteAccessPausesWorkers(t *testing.T) {
	for _, tc := range []struct {
		name, revoke, grant, table string
	}{
		{"workers", "REVOKE UPDATE ON throttled.workers FROM " + coord.CoordinatorRole,
			"GRANT UPDATE ON throttled.workers TO " + coord.CoordinatorRole, "throttled.workers"},
		{"leader", "REVOKE INSERT, UPDATE ON throttled.leader FROM " + coord.CoordinatorRole,
			"GRANT INSERT, UPDATE ON throttled.leader TO " + coord.CoordinatorRole, "throttled.leader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pgtest.Cluster(t)
			dsn, admin := coord.NewCoordinatorRole(t, c)
			var logs pgtest.Buffer
			opts := clienttest.Coordinated(t, c, 20)
			opts.CoordinationDSN = dsn
			opts.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
			client, p := clienttest.RunningJob(t, opts, "grant-"+tc.name)
			pgtest.Eventually(t, 10*time.Second, func() error {
				if !client.Leader() {
					return errors.New("the only process does not lead yet")
				}
				return nil
			})
			exec := func(q string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := admin.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			t.Cleanup(func() { exec(tc.grant) })
			exec(tc.revoke)
			revokedAt := time.Now()
			pgtest.Eventually(t, coord.DefaultLease+5*time.Second, func() error {
				if clienttest.Running(p) == nil {
					return errors.New("the worker still runs")
				}
				js := p.Status()
				r := js.Reason
				if !strings.Contains(r, "GRANT") {
					return fmt.Errorf("paused for %q; want the missing GRANT named", r)
				}
				return nil
			})
			if d := time.Since(revokedAt); d > coord.DefaultLease+time.Second {
				t.Errorf("paused %s after the revoke; want within the lease (%s) and a heartbeat", d, coord.DefaultLease)
			}
			js := p.Status()
			reason := js.Reason
			for _, want := range []string{"permission", "42501", tc.table, coord.CoordinatorRole} {
				if !strings.Contains(reason, want) {
					t.Errorf("reason %q does not mention %q", reason, want)
				}
			}
			if strings.Contains(reason, "cannot reach") {
				t.Errorf("reason %q blames reachability for a permission problem", reason)
			}
			if u, ok := p.(interface{ Unavailable() bool }); !ok || !u.Unavailable() {
				t.Error("the worker does not report itself unavailable")
			}
			if log := logs.String(); !strings.Contains(log, "GRANT") || !strings.Contains(log, tc.table) {
				t.Errorf("the log does not name the grant on %s:\n%s", tc.table, log)
			}
			exec(tc.grant)
			pgtest.Eventually(t, 15*time.Second, func() error { return clienttest.Running(p) })
		})
	}
}
