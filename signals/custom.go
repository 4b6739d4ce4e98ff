package signals

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Custom signals are scalar queries the operator writes, as freno's and
// Vitess's custom metrics are: the depth of a queue table, the age of the
// oldest unshipped change, anything one number says. Each runs on a
// connection of its own to the primary (the sampling role's, so it sees
// what pg_monitor sees), every Every, inside a READ ONLY transaction with
// its own statement_timeout, so a query can neither write nor hold the
// sampler's activity reads back. Its value is the sample of its Name; a
// failure, a NULL, a value that is not a finite number (NaN, ±Infinity)
// or a row count other than one is a failed sample: the job rules that
// read it shut (fail closed).
//
// A sample leaves nothing behind: a query that calls a function with an
// effect outside its transaction is refused at load (custom_guard.go), and
// whatever a function it calls indirectly does is contained at run time:
// the transaction is always rolled back (a notification is never
// delivered, a setting never kept) and the session's advisory locks are
// released after every sample; a connection that cannot be reset so is
// closed.

// CustomSignal is one custom signal.
type CustomSignal struct {
	// Name is the signal's name: lower case letters, digits and '_',
	// starting with a letter, and none of [Names].
	Name Name
	// Query returns one row of one numeric column.
	Query string
	// Unit is the value's unit, shown beside it.
	Unit Unit
	// Timeout bounds one run (statement_timeout). Defaults to 1s.
	Timeout time.Duration
	// Every is how often it runs. Defaults to 5s.
	Every time.Duration
	// Source is where it was defined (file:line), for its errors.
	Source string
}

// Custom signal defaults.
const (
	DefaultCustomTimeout = time.Second
	DefaultCustomEvery   = 5 * time.Second
)

var customName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// Problems says what is wrong with c, in words, or nil.
func (c CustomSignal) Problems() []string {
	var out []string
	switch {
	case !customName.MatchString(string(c.Name)):
		out = append(out, fmt.Sprintf("name %q: want lower case letters, digits and '_', starting with a letter, at most 63", c.Name))
	case Known(c.Name):
		out = append(out, fmt.Sprintf("name %q is a built-in signal", c.Name))
	}
	q := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(c.Query), ";"))
	switch {
	case q == "":
		out = append(out, "query is empty")
	case strings.Contains(q, ";"):
		out = append(out, "query holds more than one statement (a ';' inside it): a custom signal is one scalar SELECT")
	}
	out = append(out, lastingEffect(c.Query)...)
	if c.Timeout < 0 || c.Every < 0 {
		out = append(out, "timeout and every must not be negative")
	}
	return out
}

func (c CustomSignal) where() string {
	if c.Source == "" {
		return fmt.Sprintf("custom signal %q", c.Name)
	}
	return fmt.Sprintf("custom signal %q (%s)", c.Name, c.Source)
}

// customSampler runs the custom signals on a connection of its own.
type customSampler struct {
	srv     *server
	signals []CustomSignal
	last    map[Name]Sample
	due     map[Name]time.Time
}

func newCustomSampler(cfg Config) (*customSampler, error) {
	longest := time.Duration(0)
	cfg.Custom = slices.Clone(cfg.Custom)
	for i, c := range cfg.Custom {
		if ps := c.Problems(); len(ps) > 0 {
			return nil, fmt.Errorf("%s: %s", c.where(), strings.Join(ps, "; "))
		}
		c.Timeout, c.Every = cmp.Or(c.Timeout, DefaultCustomTimeout), cmp.Or(c.Every, DefaultCustomEvery)
		cfg.Custom[i] = c
		longest = max(longest, c.Timeout)
	}
	// The server cancels each query at its own timeout (SET LOCAL); the
	// connection's deadline, a second later, catches a hung server.
	srv, err := newServer(kindPrimary, cfg.PrimaryDSN, longest+time.Second, cfg.AllowSuperuser, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return &customSampler{srv: srv, signals: cfg.Custom, last: map[Name]Sample{}, due: map[Name]time.Time{}}, nil
}

func (s *customSampler) id() string      { return "custom" }
func (s *customSampler) server() *server { return s.srv }

// sample runs each custom signal that is due and returns every one's
// latest sample: a signal not due keeps its last, which ages toward its
// rule's max_age.
func (s *customSampler) sample(ctx context.Context, now func() time.Time) []Sample {
	out := make([]Sample, 0, len(s.signals))
	for _, c := range s.signals {
		if t := now(); !t.Before(s.due[c.Name]) {
			s.due[c.Name] = t.Add(c.Every)
			s.last[c.Name] = s.run(ctx, c, now)
		}
		out = append(out, s.last[c.Name])
	}
	return out
}

func (s *customSampler) run(ctx context.Context, c CustomSignal, now func() time.Time) Sample {
	var v float64
	err := s.srv.do(ctx, now(), func(ctx context.Context, conn *pgx.Conn) error { return runCustom(ctx, conn, c, &v) })
	at := now()
	if err != nil {
		return failed(c.Name, nil, c.Unit, at, fmt.Errorf("%s: %w", c.where(), err))
	}
	return Sample{Name: c.Name, Value: v, Raw: v, Unit: c.Unit, At: at}
}

// errNotScalar is a custom query that did not return one number.
var errNotScalar = errors.New("want one row of one numeric column")

// resetTimeout bounds the reset after a sample (resetSQL).
const resetTimeout = time.Second

// resetSQL undoes, after every custom sample, the session state a
// rollback leaves: session-level advisory locks. The sampler's custom
// connection takes none of its own.
const resetSQL = "SELECT pg_advisory_unlock_all()"

// runCustom runs c once in a READ ONLY transaction under its timeout,
// always rolled back, then resets the session (resetSQL). A connection
// the reset fails on is closed, which ends the session and everything it
// held; the sample then fails.
func runCustom(ctx context.Context, conn *pgx.Conn, c CustomSignal, v *float64) (err error) {
	defer func() {
		if rerr := resetSession(ctx, conn); rerr != nil && err == nil {
			err = rerr
		}
	}()
	return readCustom(ctx, conn, c, v)
}

// resetSession rolls back whatever transaction is open on conn and
// releases the session's advisory locks, or closes conn.
func resetSession(ctx context.Context, conn *pgx.Conn) error {
	if conn.IsClosed() {
		return nil // the server ended the session, and what it held
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resetTimeout)
	defer cancel()
	// One round trip, on the simple protocol: the rollback, then the
	// reset in a transaction of its own.
	_, err := conn.PgConn().Exec(rctx, "ROLLBACK; "+resetSQL).ReadAll()
	if err != nil {
		_ = conn.Close(rctx)
		return fmt.Errorf("reset the session after the sample (closed the connection instead): %w", err)
	}
	return nil
}

// readCustom reads c's value into v inside a READ ONLY transaction under
// c's timeout, and leaves the transaction to the caller to roll back.
func readCustom(ctx context.Context, conn *pgx.Conn, c CustomSignal, v *float64) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", max(1, c.Timeout.Milliseconds()))); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, c.Query)
	if err != nil {
		return timedOut(err, c.Timeout)
	}
	var got []*float64
	for rows.Next() {
		if len(rows.FieldDescriptions()) != 1 {
			rows.Close()
			return fmt.Errorf("%w, got %d columns", errNotScalar, len(rows.FieldDescriptions()))
		}
		var x *float64
		if err := rows.Scan(&x); err != nil {
			rows.Close()
			return fmt.Errorf("%w: %w", errNotScalar, err)
		}
		got = append(got, x)
	}
	if err := rows.Err(); err != nil {
		return timedOut(err, c.Timeout)
	}
	switch {
	case len(got) != 1:
		return fmt.Errorf("%w, got %d rows", errNotScalar, len(got))
	case got[0] == nil:
		return fmt.Errorf("%w, got NULL", errNotScalar)
	case math.IsNaN(*got[0]) || math.IsInf(*got[0], 0):
		// NaN compares false with every target, so it would read as
		// under any; and no JSON or rule can carry it.
		return fmt.Errorf("read %v; a custom signal must return a finite number", *got[0])
	}
	*v = *got[0]
	return nil
}

// timedOut marks a statement the server cancelled at the signal's own
// timeout with ErrTimeout and that timeout.
func timedOut(err error, timeout time.Duration) error {
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "57014" {
		return fmt.Errorf("%w after %s: %w", ErrTimeout, timeout, err)
	}
	return err
}

// CheckCustom runs every custom signal once against dsn, as the sampler
// would, and returns each failure naming its signal and Source. The
// configuration's live check and the sampler's start use it, so a query
// that cannot run is refused before anything is paced on it.
func CheckCustom(ctx context.Context, dsn string, custom []CustomSignal, allowSuperuser bool) error {
	if len(custom) == 0 {
		return nil
	}
	s, err := newCustomSampler(Config{PrimaryDSN: dsn, Custom: custom, AllowSuperuser: allowSuperuser, Logger: hclog.NewNullLogger()})
	if err != nil {
		return err
	}
	defer s.srv.close()
	if err := s.srv.ensureWithin(ctx, time.Now(), max(StartTimeout, s.srv.timeout)); err != nil {
		return err
	}
	return s.preflight(ctx)
}

// preflight runs every custom signal once.
func (s *customSampler) preflight(ctx context.Context) error {
	var errs []error
	for _, c := range s.signals {
		if x := s.run(ctx, c, time.Now); x.Err != nil {
			errs = append(errs, x.Err)
		}
	}
	return errors.Join(errs...)
}
