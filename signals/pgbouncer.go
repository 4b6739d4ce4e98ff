package signals

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PgBouncer's pools, read from its admin console (Config.PgBouncerDSN).
//
// Behind PgBouncer, the application's limit is the pool, not the
// primary's max_connections: in transaction pooling a few dozen server
// connections serve thousands of clients, and a cleanup job that holds
// them (long batches, many workers) makes the application's clients queue
// in PgBouncer while the primary looks idle. connection_headroom cannot
// see that; these signals can: clients waiting, how long the oldest has
// waited, and how much of each pool is in use.
//
// The admin console is not PostgreSQL: it speaks only the simple query
// protocol, takes one command per query, accepts no session settings
// (statement_timeout would refuse the login) and has no
// pg_is_in_recovery. The sampler uses the same long-lived connection as
// the others ([server], kind pgbouncer: one connection, every round
// bounded by Config.Timeout on the client's side, reconnects with
// backoff, failures as samples with Err), with the PostgreSQL checks and
// settings replaced by the ones below.

// The admin console's statements, one round trip each, all within one
// Config.Timeout.
const (
	pgbouncerPoolsSQL     = `SHOW POOLS`
	pgbouncerDatabasesSQL = `SHOW DATABASES`
	pgbouncerUsersSQL     = `SHOW USERS`
)

// LabelPool names a PgBouncer pool: "database/user", as SHOW POOLS lists
// it.
const LabelPool = "pool"

// pgbouncerAdminDB is the admin console's pseudo-database. SHOW POOLS
// lists its pool too; it is no pool of the primary's.
const pgbouncerAdminDB = "pgbouncer"

// pgbouncerNames are every PgBouncer signal; pgbouncerPoolNames those
// with a sample per pool.
var (
	pgbouncerNames = []Name{
		PgBouncerWaitingClients, PgBouncerWaitingClientsMax,
		PgBouncerMaxWaitSeconds, PgBouncerMaxWaitSecondsMax,
		PgBouncerPoolUsedFraction, PgBouncerPoolUsedFractionMax,
	}
	pgbouncerPoolNames = []Name{PgBouncerWaitingClients, PgBouncerMaxWaitSeconds, PgBouncerPoolUsedFraction}
)

// pgbouncerSampler reads SHOW POOLS, and the pools' sizes, every Interval.
type pgbouncerSampler struct {
	srv *server
	// known are the pools of the last good read: when a read fails, each
	// of their series fails too, rather than vanishing.
	known []string
}

func newPgBouncerSampler(cfg Config) (*pgbouncerSampler, error) {
	srv, err := newServer(kindPgBouncer, cfg.PgBouncerDSN, cfg.Timeout, false, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return &pgbouncerSampler{srv: srv}, nil
}

func (s *pgbouncerSampler) id() string      { return "pgbouncer" }
func (s *pgbouncerSampler) server() *server { return s.srv }

func (s *pgbouncerSampler) sample(ctx context.Context, now func() time.Time) []Sample {
	var pools []poolRow
	var sizes poolSizes
	err := s.srv.do(ctx, now(), func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		pools, sizes, err = readPgBouncer(ctx, conn)
		return err
	})
	at := now()
	if err != nil {
		return pgbouncerFailed(s.known, at, err)
	}
	s.known = s.known[:0]
	for _, p := range pools {
		s.known = append(s.known, p.label())
	}
	return pgbouncerSamples(pools, sizes, at)
}

// pgbouncerParams makes cfg fit the admin console: the simple query
// protocol, and no session setting but application_name (PgBouncer
// refuses a login with any it does not track).
func pgbouncerParams(cfg *pgx.ConnConfig) {
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.RuntimeParams = map[string]string{"application_name": SamplerAppName}
}

// checkPgBouncer checks at connect that the DSN reaches PgBouncer's admin
// console: a PostgreSQL server, or a pooled database of PgBouncer (which
// passes the statement to PostgreSQL), has no SHOW VERSION.
func (s *server) checkPgBouncer(ctx context.Context, conn *pgx.Conn) error {
	var version string
	err := conn.QueryRow(ctx, "SHOW VERSION").Scan(&version)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object: PostgreSQL's answer
		return fmt.Errorf("%w: the PgBouncer DSN reaches PostgreSQL at %s (a server, or a pooled database of PgBouncer), not PgBouncer's admin console; use PgBouncer's port and dbname=%s",
			ErrWrongServer, s.addr, pgbouncerAdminDB)
	}
	if err != nil {
		return fmt.Errorf("check pgbouncer %s: %w", s.addr, classify(err, s.timeout))
	}
	if !strings.HasPrefix(version, "PgBouncer") {
		return fmt.Errorf("%w: %s answers SHOW VERSION with %q, not PgBouncer's", ErrWrongServer, s.addr, version)
	}
	s.log.Debug("pgbouncer admin console", "version", version)
	return nil
}

// pgbouncerRefused reports whether PgBouncer refused the login to its
// admin console because the role is in neither stats_users nor
// admin_users: it answers "not allowed".
func pgbouncerRefused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Message == "not allowed"
}

func (s *server) pgbouncerAccessError(err error) error {
	return fmt.Errorf("%w: PgBouncer %s refused role %q its admin console: add the role to stats_users in pgbouncer.ini and reload: %w",
		ErrMissingGrant, s.addr, s.role, err)
}

// readPgBouncer reads the pools and their sizes.
func readPgBouncer(ctx context.Context, conn *pgx.Conn) ([]poolRow, poolSizes, error) {
	poolMaps, err := showRows(ctx, conn, pgbouncerPoolsSQL)
	if err != nil {
		return nil, poolSizes{}, err
	}
	pools, err := parsePools(poolMaps)
	if err != nil {
		return nil, poolSizes{}, err
	}
	dbs, err := showRows(ctx, conn, pgbouncerDatabasesSQL)
	if err != nil {
		return nil, poolSizes{}, err
	}
	users, err := showRows(ctx, conn, pgbouncerUsersSQL)
	if err != nil {
		return nil, poolSizes{}, err
	}
	sizes, err := parseSizes(dbs, users)
	return pools, sizes, err
}

// showRows runs one SHOW command and returns its rows by column name:
// the columns differ between PgBouncer versions, so none is read by
// position.
func showRows(ctx context.Context, conn *pgx.Conn, sql string) ([]map[string]any, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sql, err)
	}
	return out, nil
}

// poolRow is one pool of SHOW POOLS, reduced to what the signals need.
type poolRow struct {
	database, user string
	// waiting is cl_waiting: clients that sent a query and wait for a
	// server connection (cl_waiting_cancel_req, cancel requests queued,
	// are not clients waiting to work).
	waiting float64
	// maxWait is how long the oldest waiting client has waited, in
	// seconds: maxwait plus maxwait_us, its microseconds (1.8+).
	maxWait float64
	// inUse is the pool's server connections not free for the next
	// client; see parsePool.
	inUse float64
}

func (p poolRow) label() string { return p.database + "/" + p.user }

// parsePools reads SHOW POOLS' rows, leaving out the admin console's. A
// pool listed twice (a PgBouncer running several threads lists a pool
// once per thread) is one pool: counts added, the longest wait kept.
func parsePools(rows []map[string]any) ([]poolRow, error) {
	byLabel := map[string]*poolRow{}
	for _, m := range rows {
		p, err := parsePool(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pgbouncerPoolsSQL, err)
		}
		if p.database == pgbouncerAdminDB {
			continue
		}
		if q, ok := byLabel[p.label()]; ok {
			q.waiting += p.waiting
			q.inUse += p.inUse
			q.maxWait = max(q.maxWait, p.maxWait)
			continue
		}
		byLabel[p.label()] = &p
	}
	out := make([]poolRow, 0, len(byLabel))
	for _, k := range slices.Sorted(maps.Keys(byLabel)) {
		out = append(out, *byLabel[k])
	}
	return out, nil
}

// Server connection states of SHOW POOLS that hold a place in the pool
// and are not free for the next client: serving a client (sv_active);
// running server_reset_query or server_check_query (sv_tested); being
// opened (sv_login); and, from 1.18 on, a cancel request in flight for
// them or through them (sv_being_canceled, sv_active_cancel).
//
// sv_idle and sv_used are left out: both are idle server connections that
// go to the next client at once (sv_used ones after a server_check_query,
// having been idle past server_check_delay, 30 s by default). Counting
// them would read a pool that grew during a burst, or is kept warm by
// min_pool_size, as full until server_idle_timeout (10 minutes by
// default) closes its connections, while no client waits. sv_used must
// still be there: a row without it is not one this code knows.
var (
	inUseRequired = []string{"sv_active", "sv_tested", "sv_login"}
	idleRequired  = []string{"sv_idle", "sv_used"}
	inUseOptional = []string{"sv_active_cancel", "sv_being_canceled"}
)

// parsePool reads one row of SHOW POOLS. A column every version has
// (1.x) missing fails the row: a reading of 0 for it would be a guess.
func parsePool(m map[string]any) (poolRow, error) {
	var p poolRow
	var err error
	if p.database, err = textColumn(m, "database"); err != nil {
		return p, err
	}
	if p.user, err = textColumn(m, "user"); err != nil {
		return p, err
	}
	waiting, err := required(m, "cl_waiting")
	if err != nil {
		return p, err
	}
	secs, err := required(m, "maxwait")
	if err != nil {
		return p, err
	}
	micros, err := optional(m, "maxwait_us")
	if err != nil {
		return p, err
	}
	p.waiting = float64(waiting)
	p.maxWait = float64(secs) + float64(micros)/1e6
	for _, col := range inUseRequired {
		n, err := required(m, col)
		if err != nil {
			return p, err
		}
		p.inUse += float64(n)
	}
	for _, col := range idleRequired {
		if _, err := required(m, col); err != nil {
			return p, err
		}
	}
	for _, col := range inUseOptional {
		n, err := optional(m, col)
		if err != nil {
			return p, err
		}
		p.inUse += float64(n)
	}
	return p, nil
}

// poolSizes are the pools' sizes: a database's pool_size (its own, or
// default_pool_size, as SHOW DATABASES shows it), and a user's where the
// user has one of its own (SHOW USERS' pool_size, in the versions that
// have per-user pool sizes); a user's wins, as in PgBouncer.
type poolSizes struct {
	db, user map[string]int64
}

// of returns the size of the pool of database db and user user.
func (z poolSizes) of(db, user string) (int64, bool) {
	if n, ok := z.user[user]; ok {
		return n, true
	}
	n, ok := z.db[db]
	return n, ok
}

// parseSizes reads SHOW DATABASES' and SHOW USERS' rows.
func parseSizes(dbs, users []map[string]any) (poolSizes, error) {
	z := poolSizes{db: map[string]int64{}, user: map[string]int64{}}
	for _, m := range dbs {
		name, err := textColumn(m, "name")
		if err != nil {
			return z, fmt.Errorf("%s: %w", pgbouncerDatabasesSQL, err)
		}
		n, err := required(m, "pool_size")
		if err != nil {
			return z, fmt.Errorf("%s: %w", pgbouncerDatabasesSQL, err)
		}
		z.db[name] = n
	}
	for _, m := range users {
		name, err := textColumn(m, "name")
		if err != nil {
			return z, fmt.Errorf("%s: %w", pgbouncerUsersSQL, err)
		}
		// Absent before per-user pool sizes; empty for a user without one.
		n, set, err := intColumn(m, "pool_size")
		if err != nil {
			return z, fmt.Errorf("%s: %w", pgbouncerUsersSQL, err)
		}
		if set && n >= 0 {
			z.user[name] = n
		}
	}
	return z, nil
}

// pgbouncerSamples turns the pools into samples: per pool, the clients
// waiting, the oldest one's wait and the share of the pool in use; and
// the largest of each, 0 with no pool. A pool whose size is unknown (its
// database gone between two statements) or 0 has no share: its fraction
// fails, and so does the largest, which cannot be known without it.
func pgbouncerSamples(pools []poolRow, sizes poolSizes, at time.Time) []Sample {
	var out []Sample
	var waiting, wait, used float64
	var unknown []string
	for _, p := range pools {
		out = append(out,
			Sample{Name: PgBouncerWaitingClients, Labels: poolLabels(p), Value: p.waiting, Raw: p.waiting, Unit: UnitConnections, At: at},
			Sample{Name: PgBouncerMaxWaitSeconds, Labels: poolLabels(p), Value: p.maxWait, Raw: p.maxWait, Unit: UnitSeconds, At: at})
		waiting, wait = max(waiting, p.waiting), max(wait, p.maxWait)
		size, ok := sizes.of(p.database, p.user)
		if !ok || size <= 0 {
			unknown = append(unknown, p.label())
			out = append(out, failed(PgBouncerPoolUsedFraction, poolLabels(p), UnitRatio, at, poolSizeError(p, size, ok)))
			continue
		}
		// Over 1 while reserve_pool connections, or cancel requests'
		// own, are open.
		f := p.inUse / float64(size)
		used = max(used, f)
		out = append(out, Sample{Name: PgBouncerPoolUsedFraction, Labels: poolLabels(p), Value: f, Raw: f, Unit: UnitRatio, At: at})
	}
	out = append(out,
		Sample{Name: PgBouncerWaitingClientsMax, Value: waiting, Raw: waiting, Unit: UnitConnections, At: at},
		Sample{Name: PgBouncerMaxWaitSecondsMax, Value: wait, Raw: wait, Unit: UnitSeconds, At: at})
	if len(unknown) > 0 {
		err := fmt.Errorf("signals: pgbouncer: the size of pool %s is unknown", strings.Join(unknown, ", "))
		return append(out, failed(PgBouncerPoolUsedFractionMax, nil, UnitRatio, at, err))
	}
	return append(out, Sample{Name: PgBouncerPoolUsedFractionMax, Value: used, Raw: used, Unit: UnitRatio, At: at})
}

func poolSizeError(p poolRow, size int64, known bool) error {
	if !known {
		return fmt.Errorf("signals: pgbouncer pool %s: database %q is not in %s", p.label(), p.database, pgbouncerDatabasesSQL)
	}
	return fmt.Errorf("signals: pgbouncer pool %s: pool_size is %d", p.label(), size)
}

func poolLabels(p poolRow) map[string]string { return map[string]string{LabelPool: p.label()} }

// pgbouncerFailed returns the samples of a failed read: every signal, for
// every pool of the last good read and as the largest.
func pgbouncerFailed(known []string, at time.Time, err error) []Sample {
	var out []Sample
	units := map[Name]Unit{
		PgBouncerWaitingClients: UnitConnections, PgBouncerMaxWaitSeconds: UnitSeconds, PgBouncerPoolUsedFraction: UnitRatio,
		PgBouncerWaitingClientsMax: UnitConnections, PgBouncerMaxWaitSecondsMax: UnitSeconds, PgBouncerPoolUsedFractionMax: UnitRatio,
	}
	for _, pool := range known {
		for _, n := range pgbouncerPoolNames {
			out = append(out, failed(n, map[string]string{LabelPool: pool}, units[n], at, err))
		}
	}
	for _, n := range []Name{PgBouncerWaitingClientsMax, PgBouncerMaxWaitSecondsMax, PgBouncerPoolUsedFractionMax} {
		out = append(out, failed(n, nil, units[n], at, err))
	}
	return out
}

// required is intColumn for a column every version has.
func required(m map[string]any, col string) (int64, error) {
	n, set, err := intColumn(m, col)
	switch {
	case err == nil && !set:
		err = fmt.Errorf("no value in column %s", col)
	case err == nil && n < 0:
		// A count or a size below 0 is no reading at all.
		err = fmt.Errorf("column %s: %d is negative", col, n)
	}
	return n, err
}

// optional reads a count a version may lack: 0 when absent, an error when
// negative.
func optional(m map[string]any, col string) (int64, error) {
	n, _, err := intColumn(m, col)
	if err == nil && n < 0 {
		err = fmt.Errorf("column %s: %d is negative", col, n)
	}
	return n, err
}

// intColumn reads an integer column of a SHOW row: PgBouncer sends its
// counters as int4, and a few settings as text (SHOW USERS' pool_size,
// padded with spaces, empty when not set). set is false for a column
// absent (an older version) or empty.
func intColumn(m map[string]any, col string) (n int64, set bool, err error) {
	v, ok := m[col]
	if !ok || v == nil {
		return 0, false, nil
	}
	switch x := v.(type) {
	case int16:
		return int64(x), true, nil
	case int32:
		return int64(x), true, nil
	case int64:
		return x, true, nil
	case string:
		if strings.TrimSpace(x) == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("column %s: %q is not an integer", col, x)
		}
		return n, true, nil
	}
	return 0, false, fmt.Errorf("column %s: unexpected %T", col, v)
}

// textColumn reads a text column every version has.
func textColumn(m map[string]any, col string) (string, error) {
	s, ok := m[col].(string)
	if !ok {
		return "", fmt.Errorf("no text in column %s", col)
	}
	return s, nil
}
