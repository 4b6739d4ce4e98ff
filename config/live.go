package config

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
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
// ctx and 10 s: the primary is reachable and a primary, and every
// configured replica exists, known to the primary's replication views or
// its physical slots. A configuration naming a replica that does not
// exist (a retired server) is refused.
func (c *Config) Live(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.PrimaryDSN)
	if err != nil {
		return fmt.Errorf("config: %s: primary: %w", c.Path, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return fmt.Errorf("config: %s: primary: %w", c.Path, err)
	}
	if inRecovery {
		return fmt.Errorf("config: %s: primary: the server is in recovery (a replica), not a primary", c.Path)
	}
	rows, err := conn.Query(ctx, `SELECT application_name FROM pg_stat_replication WHERE state <> 'backup'
		UNION SELECT slot_name::text FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT temporary`)
	if err != nil {
		return fmt.Errorf("config: %s: list replicas: %w", c.Path, err)
	}
	known, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("config: %s: list replicas: %w", c.Path, err)
	}
	var errs []error
	for name := range c.Replicas {
		if !slices.Contains(known, name) {
			errs = append(errs, fmt.Errorf("config: %s: replica %q does not exist on the primary (known: %v); refusing a configuration that points at a server that is not there", c.Path, name, known))
		}
	}
	return errors.Join(errs...)
}
