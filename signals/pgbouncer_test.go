package signals

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pool118 is a SHOW POOLS row as PgBouncer 1.18 sends it (int4 counters
// as int32, text as string).
func pool118(db, user string, waiting, active, idle, used, tested, login, maxwait, maxwaitUS int32) map[string]any {
	return map[string]any{
		"database": db, "user": user,
		"cl_active": int32(0), "cl_waiting": waiting, "cl_active_cancel_req": int32(0), "cl_waiting_cancel_req": int32(0),
		"sv_active": active, "sv_active_cancel": int32(0), "sv_being_canceled": int32(0),
		"sv_idle": idle, "sv_used": used, "sv_tested": tested, "sv_login": login,
		"maxwait": maxwait, "maxwait_us": maxwaitUS, "pool_mode": "transaction",
	}
}

func TestPgBouncerParsePoolsAcrossVersions(t *testing.T) {
	// 1.7: no maxwait_us, no cancel columns.
	old := map[string]any{"database": "app", "user": "old", "cl_active": int32(1), "cl_waiting": int32(2),
		"sv_active": int32(3), "sv_idle": int32(9), "sv_used": int32(0), "sv_tested": int32(0), "sv_login": int32(0),
		"maxwait": int32(4), "pool_mode": "session"}
	// A newer row with the cancel columns in use and columns this code
	// does not know.
	newer := pool118("app", "new", 0, 1, 0, 1, 1, 1, 0, 0)
	newer["sv_active_cancel"], newer["sv_being_canceled"] = int32(1), int32(1)
	newer["load_balance_hosts"], newer["thread_id"] = nil, int32(0)
	rows := []map[string]any{
		pool118("pgbouncer", "pgbouncer", 0, 0, 0, 0, 0, 0, 0, 0), // the admin console: left out
		pool118("app", "web", 5, 4, 0, 0, 0, 0, 1, 250000),
		old,
		newer,
	}
	pools, err := parsePools(rows)
	if err != nil {
		t.Fatal(err)
	}
	want := []poolRow{
		{database: "app", user: "new", waiting: 0, maxWait: 0, inUse: 5}, // sv_used 1 is idle, checked before its next use
		{database: "app", user: "old", waiting: 2, maxWait: 4, inUse: 3}, // sv_idle 9 is room, not use
		{database: "app", user: "web", waiting: 5, maxWait: 1.25, inUse: 4},
	}
	if len(pools) != len(want) {
		t.Fatalf("pools %+v; want %+v", pools, want)
	}
	for i := range want {
		if pools[i] != want[i] {
			t.Errorf("pool %d = %+v; want %+v", i, pools[i], want[i])
		}
	}
}

// A multithreaded PgBouncer lists a pool once per thread: one pool,
// counts added, the longest wait kept.
func TestPgBouncerParsePoolsMergesAPoolListedTwice(t *testing.T) {
	pools, err := parsePools([]map[string]any{
		pool118("app", "web", 1, 2, 0, 0, 0, 0, 0, 100000),
		pool118("app", "web", 2, 2, 1, 0, 0, 0, 3, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 1 || pools[0] != (poolRow{database: "app", user: "web", waiting: 3, maxWait: 3, inUse: 4}) {
		t.Fatalf("pools %+v", pools)
	}
}

func TestPgBouncerParsePoolsRefusesWhatItCannotRead(t *testing.T) {
	for name, mod := range map[string]func(map[string]any){
		"cl_waiting": func(m map[string]any) { delete(m, "cl_waiting") },
		"sv_active":  func(m map[string]any) { m["sv_active"] = nil },
		"maxwait":    func(m map[string]any) { m["maxwait"] = 1.5 },
		"database":   func(m map[string]any) { delete(m, "database") },
		"sv_login":   func(m map[string]any) { m["sv_login"] = "many" },
	} {
		row := pool118("app", "web", 1, 1, 0, 0, 0, 0, 0, 0)
		mod(row)
		_, err := parsePools([]map[string]any{row})
		if err == nil || !strings.Contains(err.Error(), "SHOW POOLS") || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v; want one naming SHOW POOLS and the column", name, err)
		}
	}
}

func TestPgBouncerParseSizes(t *testing.T) {
	dbs := []map[string]any{
		{"name": "pgbouncer", "pool_size": int32(2)},
		{"name": "app", "pool_size": int32(20), "force_user": nil},
	}
	users := []map[string]any{
		{"name": "web", "pool_mode": nil},                 // 1.18: no pool_size column
		{"name": "batch", "pool_size": "        5"},       // per-user size, padded text
		{"name": "inherit", "pool_size": ""},              // no size of its own
		{"name": "alsoinherit", "pool_size": "       -1"}, // unset, as some versions show it
	}
	z, err := parseSizes(dbs, users)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		db, user string
		want     int64
		ok       bool
	}{
		{"app", "web", 20, true}, {"app", "batch", 5, true}, {"app", "inherit", 20, true},
		{"app", "alsoinherit", 20, true}, {"gone", "web", 0, false},
	} {
		if n, ok := z.of(c.db, c.user); n != c.want || ok != c.ok {
			t.Errorf("size of %s/%s = %d, %v; want %d, %v", c.db, c.user, n, ok, c.want, c.ok)
		}
	}
	if _, err := parseSizes([]map[string]any{{"name": "app"}}, nil); err == nil || !strings.Contains(err.Error(), "SHOW DATABASES") {
		t.Errorf("database without pool_size: %v", err)
	}
}

// bySeries indexes samples by Key.
func bySeries(out []Sample) map[string]Sample {
	m := map[string]Sample{}
	for _, s := range out {
		m[s.Key()] = s
	}
	return m
}

func TestPgBouncerSamples(t *testing.T) {
	at := time.Unix(1000, 0)
	pools := []poolRow{
		{database: "app", user: "web", waiting: 3, maxWait: 1.25, inUse: 4},
		{database: "app", user: "batch", waiting: 0, maxWait: 0, inUse: 6}, // over its size: reserve pool in use
		{database: "app", user: "idle", waiting: 0, maxWait: 0, inUse: 0},
	}
	sizes := poolSizes{db: map[string]int64{"app": 4}, user: map[string]int64{"batch": 5}}
	got := bySeries(pgbouncerSamples(pools, sizes, at))
	want := map[string]float64{
		`pgbouncer_waiting_clients{pool="app/web"}`:      3,
		`pgbouncer_max_wait_seconds{pool="app/web"}`:     1.25,
		`pgbouncer_pool_used_fraction{pool="app/web"}`:   1,
		`pgbouncer_waiting_clients{pool="app/batch"}`:    0,
		`pgbouncer_pool_used_fraction{pool="app/batch"}`: 1.2,
		`pgbouncer_pool_used_fraction{pool="app/idle"}`:  0,
		`pgbouncer_waiting_clients_max`:                  3,
		`pgbouncer_max_wait_seconds_max`:                 1.25,
		`pgbouncer_pool_used_fraction_max`:               1.2,
	}
	for k, v := range want {
		s, ok := got[k]
		if !ok || s.Err != nil || !near(s.Value, v) || s.Raw != s.Value || !s.At.Equal(at) || s.Unit == "" {
			t.Errorf("%s = %+v (present %v); want %v", k, s, ok, v)
		}
	}
	if n := len(got); n != 3*3+3 {
		t.Errorf("%d series; want 12: %v", n, got)
	}
}

// With no pool yet (no client has connected), nothing waits: the maxima
// are 0 and there is no per-pool series.
func TestPgBouncerSamplesWithNoPool(t *testing.T) {
	out := pgbouncerSamples(nil, poolSizes{}, time.Unix(1, 0))
	if len(out) != 3 {
		t.Fatalf("samples %v", out)
	}
	for _, s := range out {
		if s.Err != nil || s.Value != 0 || s.Labels != nil {
			t.Errorf("%s = %+v; want 0", s.Key(), s)
		}
	}
}

// A pool of unknown size, or of size 0, has no used fraction: its own
// fails, and so does the largest; its waiting clients still read.
func TestPgBouncerSamplesFailClosedOnAnUnknownPoolSize(t *testing.T) {
	pools := []poolRow{
		{database: "gone", user: "web", waiting: 2, inUse: 1},
		{database: "zero", user: "web", inUse: 0},
		{database: "app", user: "web", inUse: 1},
	}
	got := bySeries(pgbouncerSamples(pools, poolSizes{db: map[string]int64{"app": 4, "zero": 0}}, time.Unix(1, 0)))
	for _, k := range []string{`pgbouncer_pool_used_fraction{pool="gone/web"}`, `pgbouncer_pool_used_fraction{pool="zero/web"}`, `pgbouncer_pool_used_fraction_max`} {
		if s := got[k]; s.Err == nil || s.Value != 0 {
			t.Errorf("%s = %+v; want an error and no value", k, s)
		}
	}
	if s := got[`pgbouncer_pool_used_fraction_max`]; !strings.Contains(s.Err.Error(), "gone/web, zero/web") {
		t.Errorf("max error %v; want it to name both pools", s.Err)
	}
	if s := got[`pgbouncer_pool_used_fraction{pool="app/web"}`]; s.Err != nil || s.Value != 0.25 {
		t.Errorf("app/web = %+v", s)
	}
	if s := got[`pgbouncer_waiting_clients_max`]; s.Err != nil || s.Value != 2 {
		t.Errorf("waiting max = %+v", s)
	}
}

// A failed read fails every signal, per pool of the last good read and
// as the largest: never a value of 0.
func TestPgBouncerFailedSamples(t *testing.T) {
	cause := errors.New("boom")
	out := pgbouncerFailed([]string{"app/web", "app/batch"}, time.Unix(1, 0), cause)
	if len(out) != 2*3+3 {
		t.Fatalf("%d samples: %v", len(out), out)
	}
	seen := map[Name]int{}
	for _, s := range out {
		seen[s.Name]++
		if !errors.Is(s.Err, cause) || s.Value != 0 || s.Unit == "" {
			t.Errorf("%s = %+v", s.Key(), s)
		}
	}
	for _, n := range pgbouncerNames {
		if want := map[bool]int{true: 2, false: 1}[Conditional(n)]; seen[n] != want {
			t.Errorf("%s failed %d times; want %d", n, seen[n], want)
		}
	}
}

func TestPgBouncerSignalsAreOptIn(t *testing.T) {
	for _, n := range pgbouncerNames {
		if !Known(n) || !OptIn(n) {
			t.Errorf("%s: known %v, opt-in %v", n, Known(n), OptIn(n))
		}
		if perPool := !strings.HasSuffix(string(n), "_max"); Conditional(n) != perPool {
			t.Errorf("%s: conditional %v; want %v", n, Conditional(n), perPool)
		}
	}
}

func TestPgBouncerConfig(t *testing.T) {
	p, err := New(Config{PrimaryDSN: "postgres://u@127.0.0.1:1/db", Cores: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p.bouncer != nil || len(p.samplers()) != 1 {
		t.Fatal("PgBouncer sampled without PgBouncerDSN")
	}
	p, err = New(Config{PrimaryDSN: "postgres://u@127.0.0.1:1/db", Cores: 1, PgBouncerDSN: "postgres://m:pw@127.0.0.1:6432/pgbouncer"})
	if err != nil {
		t.Fatal(err)
	}
	srv := p.bouncer.server()
	if p.bouncer.id() != "pgbouncer" || srv.kind != kindPgBouncer || len(p.samplers()) != 2 {
		t.Fatalf("sampler %q kind %v, %d samplers", p.bouncer.id(), srv.kind, len(p.samplers()))
	}
	// The admin console refuses a login with any session setting it does
	// not track, and speaks only the simple protocol.
	if len(srv.cfg.RuntimeParams) != 1 || srv.cfg.RuntimeParams["application_name"] != SamplerAppName {
		t.Errorf("runtime params %v", srv.cfg.RuntimeParams)
	}
	if srv.cfg.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol {
		t.Errorf("exec mode %v", srv.cfg.DefaultQueryExecMode)
	}
	if _, err := New(Config{PrimaryDSN: "postgres://u@127.0.0.1:1/db", Cores: 1, PgBouncerDSN: "postgres://m:secret@[::1"}); err == nil ||
		!strings.Contains(err.Error(), "PgBouncerDSN") || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad DSN: %v", err)
	}
}

// FuzzPgBouncerRows reads SHOW POOLS and SHOW DATABASES rows of any text
// (each a "col=value,col=value" line): it never panics, and every sample
// it yields is either failed or a finite, non-negative number.
func FuzzPgBouncerRows(f *testing.F) {
	f.Add("database=app,user=u,cl_waiting=2,maxwait=1,maxwait_us=500,sv_active=4,sv_used=0,sv_tested=0,sv_login=0", "name=app,pool_size=4")
	f.Add("database=pgbouncer,user=x,cl_waiting=0,maxwait=0,sv_active=0,sv_used=0,sv_tested=0,sv_login=0", "name=pgbouncer,pool_size=2")
	f.Add("database=app,user=u,cl_waiting=-3,maxwait=x", "name=app,pool_size=0")
	f.Add("database=app,user=u,cl_waiting=-3,maxwait=0,sv_active=-9,sv_used=0,sv_tested=0,sv_login=0", "name=app,pool_size=4")
	f.Add("database=app,user=u,cl_waiting=0,maxwait=0,maxwait_us=-7,sv_active=0,sv_used=0,sv_tested=0,sv_login=0,sv_active_cancel=-2", "name=app,pool_size=4")
	f.Fuzz(func(t *testing.T, pools, dbs string) {
		rows := func(s string) []map[string]any {
			var out []map[string]any
			for _, line := range strings.Split(s, "\n") {
				m := map[string]any{}
				for _, kv := range strings.Split(line, ",") {
					k, v, _ := strings.Cut(kv, "=")
					m[k] = v
				}
				out = append(out, m)
			}
			return out
		}
		ps, err := parsePools(rows(pools))
		if err != nil {
			return
		}
		sizes, err := parseSizes(rows(dbs), nil)
		if err != nil {
			return
		}
		for _, s := range pgbouncerSamples(ps, sizes, time.Unix(1, 0)) {
			if s.Err == nil && (s.Value < 0 || math.IsNaN(s.Value) || math.IsInf(s.Value, 0)) {
				t.Fatalf("%s = %v from pools %q, databases %q: want a failed sample", s.Key(), s.Value, pools, dbs)
			}
		}
	})
}
