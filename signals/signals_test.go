package signals

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// A walsender with neither slot nor application_name is named by its
// pid and reported while connected, but never remembered as a replica:
// once it hangs up, its name cannot come back.
func TestAnAnonymousWalsenderIsNotRemembered(t *testing.T) {
	got := classifyReplicas([]walsenderRow{
		{PID: ptr(int32(25296)), AppName: ptr(""), State: ptr("streaming"), LagBytes: ptr(0.0)},
		{PID: ptr(int32(7)), AppName: ptr("node1"), State: ptr("streaming"), LagBytes: ptr(0.0)},
	}, nil)
	if len(got) != 2 || got[0].name != "node1" || got[0].anonymous || got[1].name != "walsender_25296" || !got[1].anonymous {
		t.Fatalf("replicas %+v; want node1 (named) and walsender_25296 (anonymous)", got)
	}
}

func TestClassifyReplicas(t *testing.T) {
	streaming := func(pid int32, app, slot string, bytes float64, secs *float64) walsenderRow {
		r := walsenderRow{PID: ptr(pid), AppName: ptr(app), State: ptr("streaming"), LagBytes: ptr(bytes), LagSeconds: secs}
		if slot != "" {
			r.SlotName, r.SlotType, r.SlotTemp = ptr(slot), ptr("physical"), ptr(false)
		}
		return r
	}
	slotOnly := func(name, typ string, temp bool) walsenderRow {
		return walsenderRow{SlotName: ptr(name), SlotType: ptr(typ), SlotTemp: ptr(temp)}
	}
	type want struct {
		name       string
		bytes      float64
		seconds    float64
		bytesErr   error
		secondsErr string // substring; "" means no error
	}
	for _, tc := range []struct {
		name  string
		rows  []walsenderRow
		known []string
		want  []want
	}{
		{"streaming with slot, named by slot",
			[]walsenderRow{streaming(10, "walreceiver", "r1", 4096, ptr(0.5))}, nil,
			[]want{{name: "r1", bytes: 4096, seconds: 0.5}}},
		{"no slot, named by application_name",
			[]walsenderRow{streaming(10, "r2", "", 0, nil)}, nil,
			[]want{{name: "r2"}}},
		{"idle replica: NULL replay_lag with 0 bytes is 0 s",
			[]walsenderRow{streaming(10, "r1", "r1", 0, nil)}, nil,
			[]want{{name: "r1"}}},
		{"NULL replay_lag a commit behind is caught up: 0 s",
			[]walsenderRow{streaming(10, "r1", "r1", 8192, nil)}, nil,
			[]want{{name: "r1", bytes: 8192}}},
		{"NULL replay_lag while more than 1 MiB behind is unknown, not 0",
			[]walsenderRow{streaming(10, "r1", "r1", 2<<20, nil)}, nil,
			[]want{{name: "r1", bytes: 2 << 20, secondsErr: "replay_lag is unknown while 2097152 bytes behind"}}},
		{"inactive slot is a missing replica",
			[]walsenderRow{slotOnly("r1", "physical", false)}, nil,
			[]want{{name: "r1", bytesErr: ErrReplicaMissing, secondsErr: "has no walsender"}}},
		{"known replica with no row at all is missing",
			nil, []string{"r9"},
			[]want{{name: "r9", bytesErr: ErrReplicaMissing, secondsErr: "no walsender and no slot"}}},
		{"pg_basebackup walsenders and its temporary slot are not replicas",
			[]walsenderRow{
				{PID: ptr(int32(11)), AppName: ptr("pg_basebackup"), State: ptr("backup")},
				{PID: ptr(int32(12)), AppName: ptr("pg_basebackup"), State: ptr("streaming"), LagBytes: ptr(0.0),
					SlotName: ptr("pg_basebackup_12"), SlotType: ptr("physical"), SlotTemp: ptr(true)},
				streaming(10, "r1", "r1", 0, nil),
			}, nil,
			[]want{{name: "r1"}}},
		{"logical slots are not replicas",
			[]walsenderRow{slotOnly("cdc", "logical", false)}, nil, nil},
		{"two walsenders with one name fail closed",
			[]walsenderRow{streaming(10, "walreceiver", "", 0, nil), streaming(11, "walreceiver", "", 0, nil)}, nil,
			[]want{{name: "walreceiver", bytesErr: errors.New("2 walsenders"), secondsErr: "2 walsenders share"}}},
		{"no replay position yet",
			[]walsenderRow{{PID: ptr(int32(10)), AppName: ptr("r1"), State: ptr("startup")}}, nil,
			[]want{{name: "r1", bytesErr: errors.New("not reported"), secondsErr: "has not reported a replay position"}}},
		{"a replica not streaming yet is not trusted",
			[]walsenderRow{{PID: ptr(int32(10)), AppName: ptr("r1"), State: ptr("catchup"), LagBytes: ptr(0.0), LagSeconds: ptr(0.0),
				SlotName: ptr("r1"), SlotType: ptr("physical"), SlotTemp: ptr(false)}}, nil,
			[]want{{name: "r1", bytesErr: errors.New("not streaming"), secondsErr: "not streaming yet (state catchup)"}}},
		{"sorted by name",
			[]walsenderRow{streaming(10, "b", "b", 0, nil), streaming(11, "a", "a", 1, ptr(0.1))}, []string{"a"},
			[]want{{name: "a", bytes: 1, seconds: 0.1}, {name: "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classifyReplicas(tc.rows, tc.known)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d replicas %+v; want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if g.name != w.name {
					t.Errorf("[%d] name %q; want %q", i, g.name, w.name)
				}
				if (g.bytesErr != nil) != (w.bytesErr != nil) ||
					(errors.Is(w.bytesErr, ErrReplicaMissing) && !errors.Is(g.bytesErr, ErrReplicaMissing)) {
					t.Errorf("[%d] bytes error %v; want %v", i, g.bytesErr, w.bytesErr)
				}
				if w.bytesErr == nil && g.bytes != w.bytes {
					t.Errorf("[%d] bytes %v; want %v", i, g.bytes, w.bytes)
				}
				switch {
				case w.secondsErr == "" && g.secondsErr != nil:
					t.Errorf("[%d] seconds error %v", i, g.secondsErr)
				case w.secondsErr != "" && (g.secondsErr == nil || !strings.Contains(g.secondsErr.Error(), w.secondsErr)):
					t.Errorf("[%d] seconds error %v; want %q", i, g.secondsErr, w.secondsErr)
				case w.secondsErr == "" && g.seconds != w.seconds:
					t.Errorf("[%d] seconds %v; want %v", i, g.seconds, w.seconds)
				}
			}
			// A failed replica never carries a value that reads as "no lag".
			for _, l := range got {
				for _, s := range l.samples(t0) {
					if s.Err != nil && (s.Value != 0 || s.Raw != 0) {
						t.Errorf("%s failed but carries %v", s.Key(), s.Value)
					}
				}
			}
		})
	}
}

func TestEWMA(t *testing.T) {
	e := ewma{tau: 5 * time.Second}
	if v := e.add(1, t0); v != 1 {
		t.Fatalf("first reading %v; want 1", v)
	}
	// One time constant after a step to 0: e^-1 of the step remains.
	if v := e.add(0, t0.Add(5*time.Second)); math.Abs(v-math.Exp(-1)) > 1e-12 {
		t.Fatalf("after tau %v; want %v", v, math.Exp(-1))
	}
	// The same span in many small steps smooths the same amount.
	a, b := ewma{tau: 5 * time.Second}, ewma{tau: 5 * time.Second}
	a.add(0, t0)
	b.add(0, t0)
	a.add(2, t0.Add(2*time.Second))
	for i := 1; i <= 8; i++ {
		b.add(2, t0.Add(time.Duration(i)*250*time.Millisecond))
	}
	if math.Abs(a.value-b.value) > 1e-9 {
		t.Fatalf("interval-dependent smoothing: %v vs %v", a.value, b.value)
	}
	// A reading at the same instant does not move it.
	if v := a.add(100, t0.Add(2*time.Second)); v != a.value || v > 2 {
		t.Fatalf("same-instant reading moved the average to %v", v)
	}
}

func TestHeadroomSamples(t *testing.T) {
	for _, tc := range []struct {
		h          headroom
		free, used float64
	}{
		{headroom{maxConns: 50, superuserReserved: 3, clients: 7}, 40, 7.0 / 47},
		{headroom{maxConns: 50, superuserReserved: 3, reserved: 2, clients: 45}, 0, 1},
		{headroom{maxConns: 50, superuserReserved: 3, clients: 49}, 0, 49.0 / 47}, // superusers in their reserved slots
		{headroom{maxConns: 3, superuserReserved: 3, clients: 1}, 0, 1},
	} {
		s := tc.h.samples(t0)
		if s[0].Name != ConnectionHeadroom || s[0].Value != tc.free {
			t.Errorf("%+v: headroom %v; want %v", tc.h, s[0].Value, tc.free)
		}
		if s[1].Name != ConnectionUsedFraction || math.Abs(s[1].Value-tc.used) > 1e-12 {
			t.Errorf("%+v: used %v; want %v", tc.h, s[1].Value, tc.used)
		}
	}
}

func TestActivitySamples(t *testing.T) {
	sm := newLoadSmoother(0)
	s := activity{onCPU: 3, ioWait: 2, lockWait: 1, jobs: 1}.samples(sm, 4, t0)
	want := map[Name]float64{PrimaryLoad: 0.75, PrimaryIOWait: 2, PrimaryLockWait: 1, PrimaryJobSessions: 1}
	for _, x := range s {
		if x.Raw != want[x.Name] || x.Value != want[x.Name] || !x.At.Equal(t0) || x.Err != nil {
			t.Errorf("%s = %+v; want %v", x.Name, x, want[x.Name])
		}
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Cores: 2}, "PrimaryDSN is required"},
		{Config{PrimaryDSN: "postgres://x", Cores: 0}, "Cores must be a positive number of CPU cores, got 0"},
		{Config{PrimaryDSN: "postgres://x", Cores: math.NaN()}, "Cores must be a positive"},
		{Config{PrimaryDSN: "postgres://x", Cores: 2, Interval: -time.Second}, "Interval must not be negative, got -1s"},
		{Config{PrimaryDSN: "postgres://x", Cores: 2, Interval: 5 * time.Second}, "Interval 5s must be shorter than MaxAge 3s"},
		{Config{PrimaryDSN: "postgres://x", Cores: 2, Replicas: []string{""}}, "Replicas[0] is empty"},
		{Config{PrimaryDSN: "postgres://u:hunter2@host:notaport/db", Cores: 2}, "PrimaryDSN"},
		{Config{PrimaryDSN: "postgres://x", Cores: 2, ReplicaDSNs: []string{"postgres://u:hunter2@h:99999999/db"}}, "ReplicaDSNs[0]"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want error containing %q", tc.cfg, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	if _, err := New(Config{PrimaryDSN: "postgres://x", Cores: 0.5}); err != nil {
		t.Errorf("fractional cores refused: %v", err)
	}
}

func TestConninfoValue(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"host=a port=5432 application_name=replica1 password=s", "replica1", true},
		{"application_name='my replica' host=a", "my replica", true},
		{`application_name='it\'s' host=a`, "it's", true},
		{"  application_name = spaced  ", "spaced", true},
		{"host=a password=application_name=x", "", false},
		{"host=a", "", false},
		{"application_name='unterminated", "", false},
		{"postgres://u:pw@h/db?application_name=uri1&sslmode=disable", "uri1", true},
		{"postgresql://h/db", "", false},
		{"garbage", "", false},
		{"", "", false},
	} {
		got, ok := conninfoValue(tc.in, "application_name")
		if got != tc.want || ok != tc.ok {
			t.Errorf("conninfoValue(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzConninfoValue(f *testing.F) {
	for _, s := range []string{
		"host=a application_name=r1 password=secret",
		"application_name='a b\\' c' password='p w'",
		"postgres://u:secret@h/db?application_name=x",
		"a=", "='", `a='\`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := conninfoValue(s, "application_name")
		if !ok && v != "" {
			t.Fatalf("not found but returned %q", v)
		}
		// It reads one key: a value is a substring of the input, less
		// its quotes and escapes, so it can never be longer.
		if len(v) > len(s) {
			t.Fatalf("value %q longer than input %q", v, s)
		}
		// Found only where the key is named.
		if ok && !strings.Contains(s, "application_name") {
			t.Fatalf("found %q in %q, which never names the key", v, s)
		}
	})
}

func TestSampleKeyAndSnapshot(t *testing.T) {
	s := Sample{Name: ReplicaLagBytes, Labels: replicaLabels("r1"), At: t0}
	if got := s.Key(); got != `replica_lag_bytes{replica="r1"}` {
		t.Fatalf("Key = %s", got)
	}
	snap := Snapshot{At: t0.Add(4 * time.Second), MaxAge: 3 * time.Second, Samples: []Sample{s}}
	if !snap.Stale(s) {
		t.Fatal("4 s old sample with max age 3 s not stale")
	}
	if _, ok := snap.Get(ReplicaLagBytes, replicaLabels("r2")); ok {
		t.Fatal("Get matched the wrong replica")
	}
	for _, n := range Names {
		if !Known(n) {
			t.Fatalf("%s not known", n)
		}
	}
	if Known("replica_lag") {
		t.Fatal("unknown name known")
	}
}

// A lost slot fails its own sample and the largest, which a rule reads:
// its restart_lsn is gone, so its retained bytes would read 0.
func TestLostSlotFailsTheLargest(t *testing.T) {
	at := time.Date(2026, 9, 13, 0, 0, 0, 0, time.UTC)
	out := slotSamples([]slotRow{
		{name: "replica1", kind: "physical", active: true, retained: 1e6, walStatus: "reserved"},
		{name: "cdc", kind: "logical", retained: 0, walStatus: "lost"},
	}, at)
	var maxS *Sample
	for i, s := range out {
		switch {
		case s.Name == SlotRetainedBytes && s.Labels[LabelSlot] == "cdc" && s.Err == nil:
			t.Errorf("the lost slot reads %v, not an error", s.Value)
		case s.Name == SlotRetainedBytes && s.Labels[LabelSlot] == "replica1" && (s.Err != nil || s.Value != 1e6):
			t.Errorf("the healthy slot: %+v", s)
		case s.Name == SlotRetainedBytesMax:
			maxS = &out[i]
		}
	}
	if maxS == nil || maxS.Err == nil || !strings.Contains(maxS.Err.Error(), "cdc") {
		t.Fatalf("slot_retained_bytes_max with a lost slot: %+v; want an error naming cdc", maxS)
	}
	healthy := slotSamples([]slotRow{{name: "replica1", kind: "physical", retained: 2e6, walStatus: "extended"}}, at)
	if s := healthy[len(healthy)-1]; s.Name != SlotRetainedBytesMax || s.Err != nil || s.Value != 2e6 {
		t.Fatalf("healthy: %+v", s)
	}
}

// A changed primary (another server, or a new timeline behind the same
// address) is a changed map: the replicas seen on the old one are
// forgotten, so one that no longer exists (the new primary itself, which
// streamed from the old one) is not reported against the new primary.
func TestPrimaryChangeForgetsTheOldInventory(t *testing.T) {
	s := &primarySampler{seen: map[string]bool{}}
	a := Primary{Addr: "10.0.0.1:5432", Timeline: 1}
	if _, ok := s.observe(a, t0); ok {
		t.Fatal("the first primary is no change")
	}
	s.seen["node2"], s.seen["node3"] = true, true
	if _, ok := s.observe(a, t0.Add(time.Second)); ok || len(s.seen) != 2 || !s.cur.Since.Equal(t0) {
		t.Fatalf("same primary: change %v, seen %v, since %v", ok, s.seen, s.cur.Since)
	}
	for _, nu := range []Primary{{Addr: "10.0.0.2:5432", Timeline: 2}, {Addr: "10.0.0.2:5432", Timeline: 3}} {
		s.seen["node1"] = true
		old, ok := s.observe(nu, t0.Add(time.Minute))
		if !ok || old.Same(nu) || len(s.seen) != 0 || !s.cur.Same(nu) || !s.cur.Since.Equal(t0.Add(time.Minute)) {
			t.Errorf("to %s: change %v from %s, seen %v, current %+v", nu, ok, old, s.seen, s.cur)
		}
	}
	// Forgotten names are not reported; configured ones still are.
	got := classifyReplicas([]walsenderRow{{PID: ptr(int32(7)), AppName: ptr("node1"), State: ptr("streaming"), LagBytes: ptr(0.0),
		SlotName: ptr("node1"), SlotType: ptr("physical"), SlotTemp: ptr(false)}}, []string{"node9"})
	if len(got) != 2 || got[0].name != "node1" || got[0].bytesErr != nil || got[1].name != "node9" || !errors.Is(got[1].bytesErr, ErrReplicaMissing) {
		t.Errorf("after the change: %+v", got)
	}
}
