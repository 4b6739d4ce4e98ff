package hold

import (
	"strings"
	"testing"
	"time"
)

func mustWindow(t testing.TB, s string) Window {
	t.Helper()
	w, err := ParseWindow(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWindowsContainAndNext(t *testing.T) {
	ist, _ := time.LoadLocation("Europe/Istanbul")                                               // UTC+3, no DST
	at := func(day, hh, mm int) time.Time { return time.Date(2026, 12, day, hh, mm, 0, 0, ist) } // 2026-12-07 is a Monday
	for _, tc := range []struct {
		spec string
		t    time.Time
		in   bool
		edge time.Time // the end when in, the next start when not
	}{
		{"01:00-06:00 Europe/Istanbul", at(7, 0, 59), false, at(7, 1, 0)},
		{"01:00-06:00 Europe/Istanbul", at(7, 1, 0), true, at(7, 6, 0)},
		{"01:00-06:00 Europe/Istanbul", at(7, 6, 0), false, at(8, 1, 0)},
		{"22:00-04:00 Europe/Istanbul", at(8, 2, 0), true, at(8, 4, 0)},
		{"22:00-04:00 Europe/Istanbul", at(8, 12, 0), false, at(8, 22, 0)},
		{"mon-fri 22:00-04:00 Europe/Istanbul", at(12, 3, 0), true, at(12, 4, 0)},    // Friday night into Saturday
		{"mon-fri 22:00-04:00 Europe/Istanbul", at(12, 23, 0), false, at(14, 22, 0)}, // Saturday 23:00: next Monday
		{"sun 00:00-24:00 UTC", time.Date(2026, 12, 6, 23, 59, 0, 0, time.UTC), true, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)},
		{"sat,sun 02:00-04:00 Europe/Istanbul", at(7, 3, 0), false, at(12, 2, 0)},
	} {
		w := mustWindow(t, tc.spec)
		in, end := w.Contains(tc.t)
		edge := end
		if !in {
			edge = w.Next(tc.t)
		}
		if in != tc.in || !edge.Equal(tc.edge) {
			t.Errorf("%s at %s: in %v, edge %s; want %v, %s", tc.spec, tc.t, in, edge, tc.in, tc.edge)
		}
		if back := mustWindow(t, w.String()); back.String() != w.String() {
			t.Errorf("%s: String %q does not read back", tc.spec, w.String())
		}
	}
}

func TestParseWindowSaysWhatIsWrong(t *testing.T) {
	for spec, want := range map[string]string{
		"01:00-06:00":                 "want \"[days] HH:MM-HH:MM zone\"",
		"01:00 Europe/Istanbul":       "want HH:MM-HH:MM",
		"1:00-06:00 UTC":              "start",
		"01:00-25:00 UTC":             "end",
		"24:00-06:00 UTC":             "start",
		"01:00-01:00 UTC":             "empty",
		"mon-fry 01:00-06:00 UTC":     `day "fry"`,
		"01:00-06:00 Mars/Olympus":    "zone",
		"01:00-06:00 Local":           "name one",
		"mon 01:00-06:00 UTC trailer": "want",
	} {
		_, err := ParseWindow(spec)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseWindow(%q) = %v; want an error saying %q", spec, err, want)
		}
	}
}

// Windows hold a job outside its run window and inside a maintenance
// window it avoids, until the window's edge, under stable IDs.
func TestWindowsAreHolds(t *testing.T) {
	ws := Windows{"purge": {
		Run:   []Window{mustWindow(t, "01:00-06:00 UTC")},
		Avoid: map[string]Window{"weekly-vacuum": mustWindow(t, "mon 02:00-03:00 UTC")},
	}}
	mon := func(hh, mm int) time.Time { return time.Date(2026, 12, 7, hh, mm, 0, 0, time.UTC) }
	hs := ws.Applying(mon(0, 30), "purge")
	if len(hs) != 1 || hs[0].ID != "window:purge" || hs[0].Source != SourceWindow || !hs[0].Expires.Equal(mon(1, 0)) ||
		!strings.Contains(hs[0].Reason, "outside its run window (01:00-06:00 UTC)") {
		t.Errorf("00:30: %+v; want the run window's hold until 01:00", hs)
	}
	if hs := ws.Applying(mon(1, 30), "purge"); len(hs) != 0 {
		t.Errorf("01:30: %+v; want none", hs)
	}
	hs = ws.Applying(mon(2, 15), "purge")
	if len(hs) != 1 || hs[0].ID != "maintenance:weekly-vacuum" || !hs[0].Expires.Equal(mon(3, 0)) {
		t.Errorf("02:15 Monday: %+v; want the maintenance hold until 03:00", hs)
	}
	if hs := ws.Applying(mon(2, 15), "other"); len(hs) != 0 {
		t.Errorf("a job without windows: %+v", hs)
	}
}

func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"01:00-06:00 UTC", "mon-fri 22:00-04:00 Europe/Istanbul", "sat,sun 00:00-24:00 UTC", "x", "",
		"01:30-02:30 America/New_York", "sun 01:30-01:45 America/New_York", "sun 10:00-11:00 America/Santiago",
		"sat 23:30-00:30 America/Santiago", "sun 00:00-01:00 America/Havana", "01:45-02:15 Australia/Lord_Howe",
		"mon-fri 22:00-02:00 Europe/London", "02:00-03:00 Asia/Tehran", "00:00-24:00 Europe/Paris"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseWindow(s)
		if err != nil {
			return
		}
		back, err := ParseWindow(w.String())
		if err != nil || back.String() != w.String() {
			t.Fatalf("%q → %q does not read back: %v", s, w.String(), err)
		}
		// Around the zone's first two changes of the clock from 2026 on
		// (or, in a zone without, around noon on 2026-12-07): in force
		// exactly when the wall clock says so, until the end Contains gives
		// and from the start Next gives, minute by minute for three hours.
		wall, z := oracle(w), zoned(w)
		around := []time.Time{time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
		for at := time.Date(2026, 1, 1, 0, 0, 0, 0, w.Zone); len(around) < 3; {
			_, change := at.ZoneBounds()
			if change.IsZero() || change.Year() > 2027 {
				break
			}
			around, at = append(around, change), change
		}
		for _, change := range around {
			for k := -3; k <= 3; k++ {
				now := change.Add(time.Duration(k) * 20 * time.Minute)
				in, end, ends := w.contains(now)
				if in2, end2 := w.Contains(now); in2 != in || !end2.Equal(end) {
					t.Fatalf("%q at %s: Contains %v %s, contains %v %s", s, z(now), in2, z(end2), in, z(end))
				}
				next := w.Next(now)
				if in != wall(now) {
					t.Fatalf("%q at %s: in %v; the wall clock says %v", s, z(now), in, !in)
				}
				if in && !ends && (!end.After(now) || end.After(now.Add(25*time.Hour)) || !next.IsZero()) {
					t.Fatalf("%q: in force at %s without an end; renewed at %s, next %s", s, z(now), z(end), z(next))
				}
				if in && ends && (!end.After(now) || wall(end)) {
					t.Fatalf("%q: in force at %s until %s, which is not an end", s, z(now), z(end))
				}
				if !next.IsZero() && (!next.After(now) || !wall(next) || wall(next.Add(-time.Second))) {
					t.Fatalf("%q at %s: next %s, which is not a start", s, z(now), z(next))
				}
				if !in && next.IsZero() {
					t.Fatalf("%q at %s: out of force, and never starts again", s, z(now))
				}
				for m := now.Add(time.Minute); m.Before(now.Add(3 * time.Hour)); m = m.Add(time.Minute) {
					if (in && m.Before(end) && !wall(m)) || (!in && m.Before(next) && wall(m)) {
						t.Fatalf("%q at %s: in %v until %s, next %s; the wall clock says %v at %s", s, z(now), in, z(end), z(next), !in, z(m))
					}
				}
			}
		}
	})
}
