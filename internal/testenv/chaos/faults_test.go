//go:build lab

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
)

// freeAddr returns a free loopback address for the sidecar.
func freeAddr() (string, error) {
	// Under the ephemeral range, so no outgoing connection takes it
	// before the sidecar binds it (pgcluster.FreePorts).
	ports, err := pgcluster.FreePorts(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}

func noUndo(context.Context) error { return nil }

// allFaults is the campaign, in a fixed order the seed shuffles. Clock
// steps are not among them: throttled reads time through Go's runtime
// (the vDSO, never libc), so libfaketime cannot shift one process, and
// stepping the machine's clock would move every process at once.
func allFaults() []fault {
	return []fault{
		{name: "hold", what: "a person pauses job chaos-a (`throttled pause`), then resumes it", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			out, err := r.cli(ctx, "pause", "--primary-dsn", r.c.Primary.DSN(pgcluster.RoleAdmin), "--job", jobA, "--ttl", "10m", "--reason", "chaos: a person's pause")
			if err != nil {
				return nil, fmt.Errorf("%v: %s", err, out)
			}
			return func(ctx context.Context) error {
				out, err := r.cli(ctx, "resume", "--primary-dsn", r.c.Primary.DSN(pgcluster.RoleAdmin), "--job", jobA, "--reason", "chaos: done")
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				return nil
			}, nil
		}},
		{name: "primary-sigstop", what: "the primary's postmaster and every backend SIGSTOPped, then SIGCONTed", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			if err := r.c.HangPrimary(); err != nil {
				return nil, err
			}
			return func(context.Context) error { r.c.ResumePrimary(); return nil }, nil
		}},
		{name: "primary-restart", what: "the primary restarted (fast shutdown: every session cut, open transactions rolled back)", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			if err := r.c.RestartPrimary(ctx); err != nil {
				return nil, err
			}
			return noUndo, nil
		}},
		{name: "replica-stop", what: "the required replica stopped, then started", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			if err := r.c.StopReplica(ctx); err != nil {
				return nil, err
			}
			return r.c.StartReplica, nil
		}},
		{name: "network-loss", what: "every packet between the exec workers and the primary held (the proxy stalls both ways)", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			r.proxy.Stall()
			return func(context.Context) error { r.proxy.Unstall(); return nil }, nil
		}},
		{name: "network-delay", what: "300 ms added each way between the exec workers and the primary", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			r.proxy.SetDelay(300 * time.Millisecond)
			return func(context.Context) error { r.proxy.SetDelay(0); return nil }, nil
		}},
		{name: "connections-exhausted", what: "idle connections opened until one client slot is left: connection headroom past its critical level", page: true, inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			var max, used int
			if err := r.admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int,
				(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`).Scan(&max, &used); err != nil {
				return nil, err
			}
			s, err := r.c.OpenConnections(ctx, max-used-1)
			if err != nil && s == nil {
				return nil, err
			}

			return func(context.Context) error { return s.Stop() }, nil
		}},
		{name: "monitor-revoked", what: "pg_monitor revoked from the sampler's role, then granted again", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			if _, err := r.admin.Exec(ctx, "REVOKE pg_monitor FROM "+pgcluster.RoleMonitor); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				_, err := r.admin.Exec(ctx, "GRANT pg_monitor TO "+pgcluster.RoleMonitor)
				return err
			}, nil
		}},
		{name: "schema-dropped", what: "schema throttled dropped (holds, audit, leases, checkpoints gone), then `throttled migrate`",
			// A batch that began under a lease still valid fails on its
			// checkpoint, rolls back (nothing half-applied) and ends its exec
			// with the error; a restarted exec migrates and goes on.
			exitsAs: `relation "throttled.checkpoints" does not exist`, inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
				if _, err := r.admin.Exec(ctx, "DROP SCHEMA throttled CASCADE"); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					out, err := r.cli(ctx, "migrate", "--dsn", r.c.Primary.DSN(pgcluster.RoleAdmin))
					if err != nil {
						return fmt.Errorf("%v: %s", err, out)
					}
					return nil
				}, nil
			}},
		{name: "sidecar-kill", what: "the sidecar SIGKILLed, then started again", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			r.sidecar.kill()
			return func(context.Context) error {
				r.sidecar.start(r.t, r.bin)
				return nil
			}, nil
		}},
		{name: "leader-kill", what: "whichever process leads SIGKILLed, then started again", inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			var p *proc
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := pgcluster.Poll(pctx, 100*time.Millisecond, func() (bool, error) {
				p = r.procByPID(r.leaderPID(ctx))
				return p != nil, nil
			}); err != nil {
				return nil, errors.New("no process of the campaign leads")
			}
			p.kill()
			return func(context.Context) error {
				p.start(r.t, r.bin)
				return nil
			}, nil
		}},
		{name: "cpu-critical", what: "two busy sessions per core spin on the primary: primary_load past critical", page: true, inject: func(ctx context.Context, r *rig) (func(context.Context) error, error) {
			s, err := r.c.CPULoad(ctx, 4, 10*time.Minute, "chaos_cpu")
			if err != nil {
				return nil, err
			}
			return func(context.Context) error { return s.Stop() }, nil
		}},
	}
}

// cli runs the throttled binary once, bounded by a minute.
func (r *rig) cli(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
