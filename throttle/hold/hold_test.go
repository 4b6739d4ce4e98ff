package hold

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	t0 = time.Date(2026, 10, 7, 12, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Minute)
	t2 = t0.Add(time.Hour)
	t3 = t0.Add(2 * time.Hour)
)

// newHolds returns Holds whose clock reads *clock.
func newHolds(t *testing.T, cfg LocalConfig, clock *time.Time) *Local {
	t.Helper()
	cfg.now = func() time.Time { return *clock }
	h, err := NewLocal(cfg)
	if err != nil {
		t.Fatalf("NewLocal(%+v): %v", cfg, err)
	}
	return h
}

func manual(s Scope, reason string) Request {
	return Request{Scope: s, Source: SourceManual, Reason: reason, Actor: "alice"}
}

func ids(hs []Hold) string {
	var b []string
	for _, h := range hs {
		b = append(b, h.ID)
	}
	return strings.Join(b, ",")
}

func TestNewHoldsConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg             LocalConfig
		want            string // error substring; "" means valid
		wantDef, wantMx time.Duration
	}{
		{LocalConfig{}, "", time.Hour, 24 * time.Hour},
		{LocalConfig{TTL: TTLPolicy{Max: 30 * time.Minute}}, "", 30 * time.Minute, 30 * time.Minute},
		{LocalConfig{TTL: TTLPolicy{Default: 5 * time.Minute}}, "", 5 * time.Minute, 24 * time.Hour},
		{LocalConfig{TTL: TTLPolicy{Default: -time.Second}}, "hold: LocalConfig.TTL: default TTL -1s is under the shortest hold, 1s", 0, 0},
		{LocalConfig{TTL: TTLPolicy{Max: -time.Minute}}, "hold: LocalConfig.TTL: max TTL -1m0s is under the shortest hold, 1s", 0, 0},
		{LocalConfig{TTL: TTLPolicy{Default: 2 * time.Hour, Max: time.Hour}}, "hold: LocalConfig.TTL: default TTL 2h0m0s exceeds max TTL 1h0m0s", 0, 0},
	} {
		h, err := NewLocal(tc.cfg)
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewLocal(%+v) = %v; want error containing %q", tc.cfg, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("NewLocal(%+v): %v", tc.cfg, err)
			continue
		}
		if h.cfg.TTL.Default != tc.wantDef || h.cfg.TTL.Max != tc.wantMx {
			t.Errorf("NewLocal(%+v): default TTL %s, max TTL %s; want %s, %s", tc.cfg, h.cfg.TTL.Default, h.cfg.TTL.Max, tc.wantDef, tc.wantMx)
		}
	}
}

func TestHoldsAdd(t *testing.T) {
	for _, tc := range []struct {
		name        string
		req         Request
		want        string // error substring; "" means accepted
		wantExpires time.Time
	}{
		{"default TTL", manual(AllJobs(), "deploy"), "", t0.Add(time.Hour)},
		{"explicit TTL", Request{Scope: OneJob("purge"), Source: SourceAuto, Reason: "primary load 1.4", TTL: 10 * time.Minute}, "", t0.Add(10 * time.Minute)},
		{"TTL at max", Request{Scope: Group("purge_"), Source: SourceCLI, Reason: "x", TTL: 24 * time.Hour}, "", t0.Add(24 * time.Hour)},
		{"grafana", Request{Scope: AllJobs(), Source: SourceGrafanaAlert, Reason: "alert firing"}, "", t0.Add(time.Hour)},
		{"TTL over max", Request{Scope: AllJobs(), Source: SourceManual, Reason: "x", TTL: 48 * time.Hour}, "TTL 48h0m0s exceeds the maximum 24h0m0s", time.Time{}},
		{"negative TTL", Request{Scope: AllJobs(), Source: SourceManual, Reason: "x", TTL: -time.Minute}, "TTL -1m0s is negative", time.Time{}},
		{"empty reason", manual(AllJobs(), ""), "a reason is required", time.Time{}},
		{"blank reason", manual(AllJobs(), "  \t"), "a reason is required", time.Time{}},
		{"unknown source", Request{Scope: AllJobs(), Source: "cron", Reason: "x"}, `source "cron" is not one of`, time.Time{}},
		{"empty source", Request{Scope: AllJobs(), Reason: "x"}, `source "" is not one of`, time.Time{}},
		{"bad job scope", manual(OneJob("Purge"), "x"), `scope "job:Purge": job name has 'P'`, time.Time{}},
		{"empty job scope", manual(OneJob(""), "x"), `scope "job:": job name must not be empty`, time.Time{}},
		{"empty group", manual(Group(""), "x"), `scope "group:": group prefix must not be empty`, time.Time{}},
		{"all with value", manual(Scope{Kind: ScopeAllJobs, Value: "purge"}, "x"), "scope all takes no value", time.Time{}},
		{"unknown kind", manual(Scope{Kind: "table", Value: "users"}, "x"), `kind "table" is not one of`, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := t0
			h := newHolds(t, LocalConfig{}, &clock)
			got, err := h.Add(tc.req)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("Add(%+v) = %+v, %v; want ErrInvalid containing %q", tc.req, got, err, tc.want)
				}
				if a := h.Active(t0); len(a) != 0 {
					t.Errorf("refused hold stored: %+v", a)
				}
				return
			}
			if err != nil {
				t.Fatalf("Add(%+v): %v", tc.req, err)
			}
			want := Hold{ID: "h1", Scope: tc.req.Scope, Source: tc.req.Source, Reason: tc.req.Reason,
				Actor: tc.req.Actor, Created: t0, Expires: tc.wantExpires}
			if got != want {
				t.Errorf("Add = %+v; want %+v", got, want)
			}
			if a := h.Active(t0); len(a) != 1 || a[0] != want {
				t.Errorf("Active(t0) = %+v; want [%+v]", a, want)
			}
		})
	}
}

func TestScope(t *testing.T) {
	for _, tc := range []struct {
		scope Scope
		str   string
		match []string
		miss  []string
	}{
		{AllJobs(), "all", []string{"purge", "vacuum"}, nil},
		{OneJob("purge"), "job:purge", []string{"purge"}, []string{"purge_sessions", "purg", "vacuum"}},
		{Group("purge_"), "group:purge_", []string{"purge_sessions", "purge_events"}, []string{"purge", "vacuum_purge_x"}},
	} {
		if err := tc.scope.Validate(); err != nil {
			t.Errorf("%v.Validate() = %v", tc.scope, err)
		}
		if s := tc.scope.String(); s != tc.str {
			t.Errorf("String() = %q; want %q", s, tc.str)
		}
		for _, j := range tc.match {
			if !tc.scope.Matches(j) {
				t.Errorf("%s does not match %q", tc.scope, j)
			}
		}
		for _, j := range tc.miss {
			if tc.scope.Matches(j) {
				t.Errorf("%s matches %q", tc.scope, j)
			}
		}
	}
	if err := OneJob("Bad Name").Validate(); !errors.Is(err, ErrInvalidScope) || !strings.Contains(err.Error(), `"job:Bad Name"`) {
		t.Errorf("OneJob(Bad Name).Validate() = %v; want ErrInvalidScope naming the scope", err)
	}
	if (Scope{Kind: "table", Value: "purge"}).Matches("purge") {
		t.Error("an unknown scope kind matches")
	}
}

func TestHoldsApplying(t *testing.T) {
	clock := t0
	h := newHolds(t, LocalConfig{}, &clock)
	mustAdd := func(now time.Time, req Request) {
		t.Helper()
		if _, err := h.AddAt(now, req); err != nil {
			t.Fatal(err)
		}
	}
	mustAdd(t0, Request{Scope: AllJobs(), Source: SourceAuto, Reason: "load", TTL: 10 * time.Minute})     // h1, to t0+10m
	mustAdd(t1, Request{Scope: OneJob("purge"), Source: SourceManual, Reason: "deploy"})                  // h2, to t1+1h
	mustAdd(t1, Request{Scope: Group("vacuum_"), Source: SourceCLI, Reason: "bloat", TTL: 3 * time.Hour}) // h3, to t1+3h

	for _, tc := range []struct {
		now  time.Time
		job  string
		want string
	}{
		{t1, "purge", "h1,h2"},
		{t1, "vacuum_users", "h1,h3"},
		{t1, "other", "h1"},
		{t2, "purge", "h2"}, // h1 expired at t0+10m
		{t2, "other", ""},
		{t3, "purge", ""}, // h2 expired at t1+1h
		{t3, "vacuum_users", "h3"},
	} {
		if got := ids(h.Applying(tc.now, tc.job)); got != tc.want {
			t.Errorf("Applying(%s, %q) = [%s]; want [%s]", tc.now.Format(time.TimeOnly), tc.job, got, tc.want)
		}
	}
	// Expired holds are pruned, not kept.
	h.mu.Lock()
	n := len(h.holds)
	h.mu.Unlock()
	if n != 1 {
		t.Errorf("%d holds stored after two expired; want 1", n)
	}
}

func TestHoldsActiveOldestFirst(t *testing.T) {
	clock := t0
	h := newHolds(t, LocalConfig{}, &clock)
	// Out of order instants: the list is still oldest first.
	for _, at := range []time.Time{t1, t0, t1.Add(time.Second)} {
		if _, err := h.AddAt(at, manual(AllJobs(), "x")); err != nil {
			t.Fatal(err)
		}
	}
	if got := ids(h.Active(t1)); got != "h2,h1,h3" {
		t.Errorf("Active = [%s]; want [h2,h1,h3]", got)
	}
}

func TestHoldsReleaseOnlyItsOwn(t *testing.T) {
	clock := t0
	h := newHolds(t, LocalConfig{}, &clock)
	person, err := h.Add(manual(OneJob("purge"), "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	auto, err := h.Add(Request{Scope: OneJob("purge"), Source: SourceAuto, Reason: "primary load critical"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Release(person.ID)
	if err != nil || got != person {
		t.Fatalf("Release(%s) = %+v, %v; want %+v", person.ID, got, err, person)
	}
	if a := h.Applying(t0, "purge"); len(a) != 1 || a[0] != auto {
		t.Errorf("after releasing the person's hold, Applying = %+v; want the automatic one %+v", a, auto)
	}
	// And the other way round.
	if _, err := h.Release(auto.ID); err != nil {
		t.Fatal(err)
	}
	if a := h.Applying(t0, "purge"); len(a) != 0 {
		t.Errorf("Applying = %+v; want none", a)
	}
}

func TestHoldsReleaseUnknown(t *testing.T) {
	clock := t0
	h := newHolds(t, LocalConfig{}, &clock)
	x, err := h.Add(manual(AllJobs(), "deploy")) // expires t0+1h
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		id   string
	}{
		{"never added", t0, "h9"},
		{"empty", t0, ""},
		{"expired", t0.Add(time.Hour), x.ID},
	} {
		clock = tc.now
		_, err := h.Release(tc.id)
		if !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.id)) {
			t.Errorf("%s: Release(%q) = %v; want ErrUnknown naming the id", tc.name, tc.id, err)
		}
	}
	// Released twice.
	clock = t0
	h2 := newHolds(t, LocalConfig{}, &clock)
	y, _ := h2.Add(manual(AllJobs(), "deploy"))
	if _, err := h2.Release(y.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h2.Release(y.ID); !errors.Is(err, ErrUnknown) {
		t.Errorf("second Release = %v; want ErrUnknown", err)
	}
}

func TestHoldsConcurrent(t *testing.T) {
	clock := t0
	h := newHolds(t, LocalConfig{}, &clock)
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				x, err := h.AddAt(t0, manual(OneJob(fmt.Sprintf("job%d", w)), "x"))
				if err != nil {
					t.Error(err)
					return
				}
				h.Applying(t0, "job0")
				h.Active(t0)
				if i%2 == 0 {
					if _, err := h.ReleaseAt(t0, x.ID); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()

	active := h.Active(t0)
	if want := workers * each / 2; len(active) != want {
		t.Errorf("%d holds active; want %d", len(active), want)
	}
	seen := map[string]bool{}
	for _, x := range active {
		if seen[x.ID] {
			t.Errorf("duplicate ID %s", x.ID)
		}
		seen[x.ID] = true
	}
	if n := len(h.Applying(t0, "job3")); n != each/2 {
		t.Errorf("%d holds apply to job3; want %d", n, each/2)
	}
}

func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"all", "job:purge", "group:purge_", "job:", "all:x", "all:", ":", "job:Bad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScope(s)
		if err != nil {
			return
		}
		if sc.Validate() != nil || sc.String() != s {
			t.Fatalf("ParseScope(%q) = %v, which does not print back", s, sc)
		}
	})
}
