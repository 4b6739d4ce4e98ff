package signals

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// A custom signal reads its number on the real primary and follows it; a
// query that writes, runs too long, returns NULL or no row is a failed
// sample naming the signal and where it was defined, never a value. The
// writing and the sleeping are done inside functions of the test's own,
// past the load-time refusal of nextval and pg_sleep, so what is shown is
// the transaction's own containment.
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
		"CREATE OR REPLACE FUNCTION custom_next() RETURNS bigint LANGUAGE sql AS $$SELECT nextval('custom_seq')$$",
		"CREATE OR REPLACE FUNCTION custom_slow() RETURNS int LANGUAGE sql AS $$SELECT 1 FROM pg_sleep(5)$$",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	custom := []CustomSignal{
		{Name: "queue_depth", Query: "SELECT count(*) FROM custom_queue", Unit: "rows", Every: time.Millisecond, Source: "t.hcl:1"},
		{Name: "writes", Query: "SELECT custom_next()", Every: time.Millisecond, Source: "t.hcl:2"},
		{Name: "slow", Query: "SELECT custom_slow()", Timeout: 200 * time.Millisecond, Every: time.Second, Source: "t.hcl:3"},
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
		{Name: "ok", Query: "SELECT nextval('custom_seq')"},
		{Name: "ok", Query: "SELECT 1 FROM pg_sleep(5)"},
	} {
		if len(c.Problems()) == 0 {
			t.Errorf("%+v: no problem found", c)
		}
	}
	if ps := (CustomSignal{Name: "queue_depth", Query: "SELECT count(*) FROM q;"}).Problems(); len(ps) != 0 {
		t.Errorf("a good signal has problems: %v", ps)
	}
}

// customPoller makes a poller sampling custom on the package's primary,
// closed when the test ends, and reads it one tick at a time.
func customPoller(t *testing.T, c *pgcluster.Cluster, custom ...CustomSignal) func() map[Name]Sample {
	t.Helper()
	p, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, Custom: custom})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return func() map[Name]Sample {
		tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Tick(tctx)
		out := map[Name]Sample{}
		for _, s := range p.Snapshot().Samples {
			out[s.Name] = s
		}
		return out
	}
}

// A custom signal that reads NaN or an infinity has no reading: NaN is
// under every target and over none, and no JSON carries either. The
// sample fails closed, naming the signal and where it was defined, and
// the start-up check (check-config --live, run) refuses it. It once read
// as a value: /v1/status then answered 200 with an empty body.
func TestCustomSignalNonFiniteIsAFailedReading(t *testing.T) {
	c := pgtest.Cluster(t)
	custom := []CustomSignal{
		{Name: "nan_float", Query: "SELECT 'NaN'::float8", Every: time.Millisecond, Source: "t.hcl:1"},
		{Name: "minus_inf", Query: "SELECT '-Infinity'::float8", Every: time.Millisecond, Source: "t.hcl:2"},
		{Name: "nan_numeric", Query: "SELECT 'NaN'::numeric", Every: time.Millisecond, Source: "t.hcl:3"},
		{Name: "inf_numeric", Query: "SELECT 'Infinity'::numeric", Every: time.Millisecond, Source: "t.hcl:4"},
		{Name: "finite", Query: "SELECT 1e308::float8", Every: time.Millisecond, Source: "t.hcl:5"},
	}
	got := customPoller(t, c, custom...)()
	for name, read := range map[Name]string{"nan_float": "NaN", "minus_inf": "-Inf", "nan_numeric": "NaN", "inf_numeric": "+Inf"} {
		s := got[name]
		want := "read " + read + "; a custom signal must return a finite number"
		if s.Err == nil || !strings.Contains(s.Err.Error(), want) || !strings.Contains(s.Err.Error(), `custom signal "`+string(name)+`"`) ||
			!strings.Contains(s.Err.Error(), "t.hcl:") {
			t.Errorf("%s = %+v; want a failed sample saying %q, naming the signal and where it was defined", name, s, want)
		}
	}
	if s := got["finite"]; s.Err != nil || s.Value != 1e308 {
		t.Errorf("finite = %+v; want 1e308", s)
	}
	err := CheckCustom(context.Background(), c.Primary.DSN(pgcluster.RoleMonitor), custom, false)
	for _, where := range []string{"t.hcl:1", "t.hcl:2", "t.hcl:3", "t.hcl:4"} {
		if err == nil || !strings.Contains(err.Error(), where) || !strings.Contains(err.Error(), "must return a finite number") {
			t.Errorf("CheckCustom: %v; want it to refuse %s as not finite", err, where)
		}
	}
	if err != nil && strings.Contains(err.Error(), "t.hcl:5") {
		t.Errorf("CheckCustom refused the finite one: %v", err)
	}
}

// A session advisory lock taken in a sample outlives its transaction: the
// sampler once kept it, and another session's pg_try_advisory_lock on
// the key read false for as long as the sampler ran. The call is refused
// at load; taken through a function that hides it, it is released after
// the sample, which still reads its value.
func TestCustomSignalLeavesNoAdvisoryLock(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	direct := CustomSignal{Name: "locker", Query: `SELECT 1 FROM (SELECT pg_catalog."pg_advisory_lock" (777)) a`, Source: "t.hcl:7"}
	if _, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, Custom: []CustomSignal{direct}}); err == nil ||
		!strings.Contains(err.Error(), "pg_advisory_lock()") || !strings.Contains(err.Error(), "t.hcl:7") {
		t.Errorf("New with %q: %v; want it refused, naming pg_advisory_lock and t.hcl:7", direct.Query, err)
	}
	adminExec(t, c, "CREATE OR REPLACE FUNCTION custom_lock_777() RETURNS int LANGUAGE sql AS $$SELECT 1 FROM (SELECT pg_advisory_lock(777)) a$$")
	read := customPoller(t, c, CustomSignal{Name: "locker", Query: "SELECT 1 FROM (SELECT custom_lock_777()) a", Every: time.Millisecond, Source: "t.hcl:7"})
	other := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	for i := range 2 {
		if s := read()["locker"]; s.Err != nil || s.Value != 1 {
			t.Fatalf("sample %d: %+v; want 1", i, s)
		}
		var got bool
		if err := other.QueryRow(ctx, "SELECT pg_try_advisory_lock(777)").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if !got {
			t.Fatalf("after sample %d another session cannot take advisory lock 777: the sampler still holds it", i)
		}
		if _, err := other.Exec(ctx, "SELECT pg_advisory_unlock(777)"); err != nil {
			t.Fatal(err)
		}
	}
}

// A notification sent in a sample is never delivered: the sample's
// transaction is rolled back, always. pg_notify and pg_cancel_backend are
// refused at load; the notification is sent here through a function of
// the test's own. A listener sees the sentinel notified after the sample,
// and nothing before it.
func TestCustomSignalNotifiesNoOne(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	for _, q := range []string{"SELECT 1 FROM (SELECT pg_notify('custom_chan', 'x')) a", "SELECT pg_cancel_backend(pg_backend_pid())::int",
		"SELECT pg_terminate_backend(1)::int", "SELECT count(*) FROM (SELECT setval('s', 1)) a", "SELECT nextval ('s')"} {
		cs := CustomSignal{Name: "n", Query: q, Source: "t.hcl:9"}
		if _, err := New(Config{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2, Custom: []CustomSignal{cs}}); err == nil ||
			!strings.Contains(err.Error(), "t.hcl:9") || !strings.Contains(err.Error(), "refused") {
			t.Errorf("New with %q: %v; want it refused at t.hcl:9", q, err)
		}
	}
	adminExec(t, c, "CREATE OR REPLACE FUNCTION custom_notify() RETURNS int LANGUAGE sql AS $$SELECT 1 FROM (SELECT pg_notify('custom_chan', 'from the sample')) a$$")
	listener := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	if _, err := listener.Exec(ctx, "LISTEN custom_chan"); err != nil {
		t.Fatal(err)
	}
	s := customPoller(t, c, CustomSignal{Name: "notifier", Query: "SELECT custom_notify()", Every: time.Millisecond, Source: "t.hcl:9"})()["notifier"]
	if s.Err != nil || s.Value != 1 {
		t.Fatalf("notifier = %+v; want 1", s)
	}
	adminExec(t, c, "NOTIFY custom_chan, 'sentinel'")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Payload != "sentinel" {
		t.Fatalf("the listener got %q before the sentinel: the sample's notification was delivered", n.Payload)
	}
}
