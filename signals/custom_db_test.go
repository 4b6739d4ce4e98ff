package signals

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/pgcluster"
	"github.com/throttled/throttled/internal/pgtest"
)

// A custom signal reads its number on the real primary and follows it; a
// query that writes, runs too long, returns NULL or no row is a failed
// sample naming the signal and where it was defined, never a value.
func TestCustomSignalsReadOnlyBoundedAndFailClosed(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	for _, q := range []string{
		"DROP TABLE IF EXISTS custom_queue", "DROP SEQUENCE IF EXISTS custom_seq",
		"CREATE TABLE custom_queue (id int)", "CREATE SEQUENCE custom_seq",
		"GRANT SELECT ON custom_queue TO " + pgcluster.RoleMonitor,
		"GRANT USAGE, UPDATE ON SEQUENCE custom_seq TO " + pgcluster.RoleMonitor,
		"INSERT INTO custom_queue SELECT generate_series(1, 42)",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	custom := []CustomSignal{
		{Name: "queue_depth", Query: "SELECT count(*) FROM custom_queue", Unit: "rows", Every: time.Millisecond, Source: "t.hcl:1"},
		{Name: "writes", Query: "SELECT nextval('custom_seq')", Every: time.Millisecond, Source: "t.hcl:2"},
		{Name: "slow", Query: "SELECT 1 FROM pg_sleep(5)", Timeout: 200 * time.Millisecond, Every: time.Second, Source: "t.hcl:3"},
		{Name: "null", Query: "SELECT NULL::int", Every: time.Millisecond, Source: "t.hcl:4"},
		{Name: "empty", Query: "SELECT 1 WHERE false", Every: time.Millisecond, Source: "t.hcl:5"},
	}
	// Not connected first: Connect refuses bad custom signals (below).
	p, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, Custom: custom})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	read := func() map[Name]Sample {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		p.Tick(tctx)
		out := map[Name]Sample{}
		for _, s := range p.Snapshot().Samples {
			out[s.Name] = s
		}
		return out
	}
	got := read()
	if s := got["queue_depth"]; s.Err != nil || s.Value != 42 || s.Unit != "rows" {
		t.Errorf("queue_depth = %+v; want 42 rows", s)
	}
	for name, want := range map[Name]string{"writes": "read-only", "slow": "statement timeout", "null": "NULL", "empty": "0 rows"} {
		s := got[name]
		if s.Err == nil || !strings.Contains(s.Err.Error(), want) || !strings.Contains(s.Err.Error(), "t.hcl:") {
			t.Errorf("%s = %+v; want a failed sample saying %q and where it was defined", name, s, want)
		}
	}
	if !errors.Is(got["slow"].Err, ErrTimeout) {
		t.Errorf("slow: %v; want ErrTimeout", got["slow"].Err)
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT last_value FROM custom_seq").Scan(&n); err != nil || n != 1 {
		t.Errorf("custom_seq last_value = %d, %v: the read-only query advanced it", n, err)
	}
	if _, err := admin.Exec(ctx, "INSERT INTO custom_queue SELECT generate_series(1, 8)"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		if s := read()["queue_depth"]; s.Err != nil || s.Value != 50 {
			return errors.New("queue_depth has not followed the table to 50")
		}
		return nil
	})

	// The start-up check refuses the bad ones and names each.
	err = CheckCustom(ctx, c.Primary.DSN(pgcluster.RoleMonitor), custom, false)
	for _, where := range []string{"t.hcl:2", "t.hcl:3", "t.hcl:4", "t.hcl:5"} {
		if err == nil || !strings.Contains(err.Error(), where) {
			t.Errorf("CheckCustom: %v; want it to name %s", err, where)
		}
	}
	if err != nil && strings.Contains(err.Error(), "t.hcl:1") {
		t.Errorf("CheckCustom refused the good signal: %v", err)
	}
	if !strings.Contains(err.Error(), "timed out after 200ms") {
		t.Errorf("CheckCustom: %v; want the slow one's own timeout, 200ms", err)
	}
	if err := connectWith(ctx, c, custom[:1]); err != nil {
		t.Errorf("Connect with a good custom signal: %v", err)
	}
	if err := connectWith(ctx, c, custom); err == nil || !strings.Contains(err.Error(), "t.hcl:2") {
		t.Errorf("Connect with bad custom signals: %v; want it refused, naming t.hcl:2", err)
	}
}

// connectWith makes a poller with custom signals and connects it.
func connectWith(ctx context.Context, c *pgcluster.Cluster, custom []CustomSignal) error {
	p, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, Custom: custom})
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Connect(ctx)
}

func TestCustomSignalProblems(t *testing.T) {
	for _, c := range []CustomSignal{
		{Name: "Bad", Query: "SELECT 1"},
		{Name: "primary_load", Query: "SELECT 1"},
		{Name: "ok", Query: "  ; "},
		{Name: "ok", Query: "SELECT 1; DELETE FROM t"},
		{Name: "ok", Query: "SELECT 1", Timeout: -time.Second},
	} {
		if len(c.Problems()) == 0 {
			t.Errorf("%+v: no problem found", c)
		}
	}
	if ps := (CustomSignal{Name: "queue_depth", Query: "SELECT count(*) FROM q;"}).Problems(); len(ps) != 0 {
		t.Errorf("a good signal has problems: %v", ps)
	}
}
