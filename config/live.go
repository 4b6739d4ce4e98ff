package config

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/signals"
)

func lookupToken(tokens []Token, secret string) (Token, bool) {
	var found Token
	ok := 0
	for _, t := range tokens {
		// Every token is compared, so the time taken says nothing about
		// which (if any) matched.
		if subtle.ConstantTimeCompare([]byte(t.Secret), []byte(secret)) == 1 {
			found = t
			ok++
		}
	}
	// A secret two tokens share is refused at load; should one slip
	// through, it is nobody's rather than whichever came last.
	return found, ok == 1
}

// Live checks the configuration against the running cluster, bounded by
// ctx and 10 s: the primary is reachable and a primary, as the sampler's
// role would find it (the grant, no superuser); every configured
// replica exists, known to the primary's replication views or its
// physical slots; and every replica DSN reaches, as the sampler's role and
// within [signals.StartTimeout], a server in recovery that is the replica
// its block names (named as the sampler names replicas). A configuration
// naming a replica that does not exist (a retired server), or a replica
// DSN that is unreachable or points elsewhere, is refused, each error at
// the block's file:line.
func (c *Config) Live(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Each Prometheus signal's queries run once, as the sampler's start
	// runs them: an error names its block's file:line.
	c.LiveWarnings = nil
	required, optional := signals.SplitOptional(signals.CheckPrometheus(ctx, c.Prometheus.PrometheusConfig))
	if required != nil {
		return fmt.Errorf("%w (its rule is required; a signal whose rule says required = false never keeps run from starting)", c.promErr(required))
	}
	if optional != nil {
		for _, line := range strings.Split(optional.Error(), "\n") {
			c.LiveWarnings = append(c.LiveWarnings, fmt.Sprintf("%s: prometheus: %s (its rule is not required: run starts, and the signal reads as failed until Prometheus answers)", c.at(c.places.prom), line))
		}
	}
	primary := c.at(c.places.primary)
	// As the sampler will connect: the role's grant, no superuser, and a
	// server not in recovery.
	if err := signals.CheckPrimary(ctx, c.PrimaryDSN, signals.StartTimeout); err != nil {
		return fmt.Errorf("config: %s: primary: dsn: %w", primary, err)
	}
	conn, err := pgx.Connect(ctx, c.PrimaryDSN)
	if err != nil {
		return fmt.Errorf("config: %s: primary: %w", primary, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return fmt.Errorf("config: %s: primary: %w", primary, err)
	}
	if inRecovery {
		return fmt.Errorf("config: %s: primary: the server is in recovery (a replica), not a primary", primary)
	}
	rows, err := conn.Query(ctx, `SELECT application_name FROM pg_stat_replication WHERE state <> 'backup'
		UNION SELECT slot_name::text FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT temporary`)
	if err != nil {
		return fmt.Errorf("config: %s: list replicas: %w", primary, err)
	}
	known, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("config: %s: list replicas: %w", primary, err)
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Replicas)) {
		if !slices.Contains(known, name) {
			errs = append(errs, fmt.Errorf("config: %s: replica %q does not exist on the primary (known: %v); refusing a configuration that points at a server that is not there",
				c.at(c.places.replicas[name]), name, known))
		}
	}
	// Coordination writes schema throttled (the workers' leases, the
	// leader's publication, migrations at start): a role that may not is
	// refused here, before run starts, in the file's words.
	if err := checkCoordination(ctx, c.CoordinationDSN); err != nil {
		field := "coordination_dsn"
		if c.coordinationIsDSN {
			field = "coordination_dsn (left out, so dsn: the sampler's pg_monitor role)"
		}
		errs = append(errs, fmt.Errorf("config: %s: primary: %s: %w", primary, field, err))
	}
	// Each custom signal runs once as the sampler will run it, contained
	// as the sampler contains it: a query that fails, or reads anything but
	// one finite number (NaN and the infinities are refused), is an error
	// at the block's file:line.
	if err := signals.CheckCustom(ctx, c.PrimaryDSN, c.Custom, false); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	return errors.Join(append(errs, c.checkReplicaDSNs(ctx)...)...)
}

// checkReplicaDSNs connects to every replica DSN at once, as the sampler
// does, and refuses one that cannot be reached, is not in recovery, or is
// not the replica its block names: its samples would be another server's,
// or none.
func (c *Config) checkReplicaDSNs(ctx context.Context) []error {
	names := slices.Sorted(maps.Keys(c.ReplicaDSNs))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			at := c.at(c.places.replicas[name])
			got, err := signals.CheckReplica(ctx, c.ReplicaDSNs[name], signals.StartTimeout)
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("config: %s: replica %q: dsn: %w", at, name, err)
			case got != name:
				errs[i] = fmt.Errorf("config: %s: replica %q: dsn reaches the replica named %q (its primary_slot_name, else the application_name of its primary_conninfo, else its cluster_name), not %q",
					at, name, got, name)
			}
		})
	}
	wg.Wait()
	return errs
}

// checkCoordination connects as the coordination role and checks that it
// may write schema throttled, changing nothing.
func checkCoordination(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return schema.CheckWrite(ctx, conn)
}
