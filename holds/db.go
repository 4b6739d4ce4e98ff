package holds

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/schema"
	"github.com/throttled/throttled/throttle/hold"
)

// Channel is the LISTEN/NOTIFY channel every change to a hold is sent on.
const Channel = "throttled_holds"

// Config configures a [DB].
type Config struct {
	// TTL is this process's own rule for a hold's life, checked before any
	// query. Its Default, when set, is a hold's life when the request
	// gives none; unset (the CLI's), the cluster's default applies
	// (throttled.settings.default_hold_ttl, see [Store.SetTTL]). Its Max,
	// when set, can only narrow the cluster's cap
	// (throttled.settings.max_hold_ttl), which the database enforces on
	// every insert and renewal whatever a client asks, so no hold lives
	// forever: a fast, friendly refusal.
	TTL hold.TTLPolicy
}

// Check reports whether a DB under c would accept r, without a
// database: the cluster's default and cap apply only when the hold is
// written.
func (c Config) Check(r hold.Request) error {
	_, err := c.check(r)
	return err
}

func (c Config) check(r hold.Request) (time.Duration, error) {
	return r.Check(c.TTL)
}

// DB is throttled's state in the coordination database, schema
// throttled, on one pool. New does no I/O and never migrates: call
// [Migrate] first as a role that may write the schema, or [CheckSchema]
// to read as one that may not. Each method returns a view on one
// concern; every view is safe for concurrent use, as is DB.
type DB struct {
	pool     *pgxpool.Pool
	holds    *Store
	windows  *WindowStore
	audit    *AuditLog
	registry *Registry
}

// New returns a DB on pool, under cfg. It checks cfg and touches no
// database: the schema must already be current (see [Migrate]).
func New(pool *pgxpool.Pool, cfg Config) (*DB, error) {
	if err := cfg.TTL.Check(); err != nil {
		return nil, fmt.Errorf("holds: Config.TTL: %w", err)
	}
	return &DB{
		pool:     pool,
		holds:    &Store{db: pool, cfg: cfg},
		windows:  &WindowStore{db: pool},
		audit:    &AuditLog{db: pool},
		registry: &Registry{db: pool},
	}, nil
}

// Migrate applies the migrations schema throttled lacks, creating it if
// need be, under an advisory lock so processes starting together migrate
// once. It is idempotent and needs a role that may write the schema.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := schema.Migrate(ctx, pool)
	return err
}

// CheckSchema reports whether schema throttled is current, reading only:
// for a role that may not write the schema, such as the sampler's
// pg_monitor role (migration 0014 grants it SELECT). A schema that lacks
// migrations is an error wrapping [ErrSchemaBehind] that names them.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	pending, err := schema.Pending(ctx, pool)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		var names []string
		for _, m := range pending {
			names = append(names, fmt.Sprintf("%04d_%s", m.Version, m.Name))
		}
		return fmt.Errorf("%w: it lacks %s; run `throttled migrate` as a role that may write schema throttled", ErrSchemaBehind, strings.Join(names, ", "))
	}
	return nil
}

// Pool is the coordination database's pool, for the other state kept in
// schema throttled beside the holds.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Holds creates, releases and lists the cluster's holds.
func (db *DB) Holds() *Store { return db.holds }

// Windows writes the cluster's run and maintenance windows.
func (db *DB) Windows() *WindowStore { return db.windows }

// Audit appends to and reads the audit log.
func (db *DB) Audit() *AuditLog { return db.audit }

// Registry reads the jobs and signals the cluster's workers declare.
func (db *DB) Registry() *Registry { return db.registry }
