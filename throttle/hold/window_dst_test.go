package hold

import (
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, on a machine without /usr/share/zoneinfo
)

// utc is an instant, written in UTC so that no test case depends on how
// time.Date reads a wall time the clock skips or repeats.
func utc(month time.Month, day, hh, mm int) time.Time {
	return time.Date(2026, month, day, hh, mm, 0, 0, time.UTC)
}

// Windows follow the zone's wall clock across its changes: a skipped hour
// does not happen, a repeated hour happens twice, and a day without a
// midnight still happens. Each case is one instant: whether the window is
// in force, when it stops being (if it is) and when it next starts.
func TestWindowsAcrossClockChanges(t *testing.T) {
	for _, tc := range []struct {
		spec      string
		at        time.Time
		in        bool
		end, next time.Time // end when in
	}{
		// America/New_York, Sun 2026-03-08: 01:59:59 EST (06:59:59Z) is followed by 03:00 EDT (07:00Z).
		{"02:00-03:00 America/New_York", utc(3, 8, 6, 0), false, time.Time{}, utc(3, 9, 6, 0)}, // 01:00 EST
		{"02:00-03:00 America/New_York", utc(3, 8, 6, 30), false, time.Time{}, utc(3, 9, 6, 0)},
		{"02:00-03:00 America/New_York", utc(3, 8, 7, 0), false, time.Time{}, utc(3, 9, 6, 0)},
		{"01:30-02:30 America/New_York", utc(3, 8, 6, 29), false, time.Time{}, utc(3, 8, 6, 30)},
		{"01:30-02:30 America/New_York", utc(3, 8, 6, 30), true, utc(3, 8, 7, 0), utc(3, 9, 5, 30)}, // until 03:00 EDT
		{"01:30-02:30 America/New_York", utc(3, 8, 6, 59), true, utc(3, 8, 7, 0), utc(3, 9, 5, 30)},
		{"01:30-02:30 America/New_York", utc(3, 8, 7, 0), false, time.Time{}, utc(3, 9, 5, 30)},
		{"01:00-02:30 America/New_York", utc(3, 8, 6, 45), true, utc(3, 8, 7, 0), utc(3, 9, 5, 0)},
		{"sun 02:00-02:30 America/New_York", utc(3, 8, 5, 0), false, time.Time{}, utc(3, 15, 6, 0)}, // skipped: next Sunday
		{"sat 23:00-02:30 America/New_York", utc(3, 8, 6, 59), true, utc(3, 8, 7, 0), utc(3, 15, 3, 0)},
		// America/New_York, Sun 2026-11-01: 01:59:59 EDT (05:59:59Z) is followed by 01:00 EST (06:00Z).
		{"01:30-01:45 America/New_York", utc(11, 1, 5, 35), true, utc(11, 1, 5, 45), utc(11, 1, 6, 30)},
		{"01:30-01:45 America/New_York", utc(11, 1, 5, 50), false, time.Time{}, utc(11, 1, 6, 30)},
		{"01:30-01:45 America/New_York", utc(11, 1, 6, 35), true, utc(11, 1, 6, 45), utc(11, 2, 6, 30)},
		{"01:00-02:00 America/New_York", utc(11, 1, 5, 0), true, utc(11, 1, 7, 0), utc(11, 2, 6, 0)},
		{"01:00-02:00 America/New_York", utc(11, 1, 6, 30), true, utc(11, 1, 7, 0), utc(11, 2, 6, 0)},
		{"sun 00:00-24:00 America/New_York", utc(11, 1, 4, 0), true, utc(11, 2, 5, 0), utc(11, 8, 5, 0)}, // 25 hours
		// America/Santiago, Sun 2026-09-06: Sat 23:59:59 -04 (03:59:59Z) is followed by Sun 01:00 -03 (04:00Z).
		{"sun 10:00-11:00 America/Santiago", utc(9, 5, 12, 0), false, time.Time{}, utc(9, 6, 13, 0)},
		{"sun 10:00-11:00 America/Santiago", utc(9, 6, 13, 30), true, utc(9, 6, 14, 0), utc(9, 13, 13, 0)},
		{"sun 00:00-01:00 America/Santiago", utc(9, 5, 12, 0), false, time.Time{}, utc(9, 13, 3, 0)},
		{"sun 00:30-02:00 America/Santiago", utc(9, 5, 12, 0), false, time.Time{}, utc(9, 6, 4, 0)},
		{"sun 00:30-02:00 America/Santiago", utc(9, 6, 4, 0), true, utc(9, 6, 5, 0), utc(9, 13, 3, 30)},
		{"sat 22:00-02:00 America/Santiago", utc(9, 6, 3, 59), true, utc(9, 6, 5, 0), utc(9, 13, 1, 0)},
		// America/Havana, Sun 2026-03-08: Sat 23:59:59 CST (04:59:59Z) is followed by Sun 01:00 CDT (05:00Z).
		{"sun 10:00-11:00 America/Havana", utc(3, 7, 12, 0), false, time.Time{}, utc(3, 8, 14, 0)},
		{"sun 10:00-11:00 America/Havana", utc(3, 8, 14, 30), true, utc(3, 8, 15, 0), utc(3, 15, 14, 0)},
		// America/Santiago, 2026-04-05: Sat 23:59:59 -03 (02:59:59Z) is followed by Sat 23:00 -04 (03:00Z).
		{"sat 23:00-24:00 America/Santiago", utc(4, 5, 2, 30), true, utc(4, 5, 4, 0), utc(4, 12, 3, 0)},
		{"sun 00:00-01:00 America/Santiago", utc(4, 4, 12, 0), false, time.Time{}, utc(4, 5, 4, 0)},
		{"sat 23:30-00:30 America/Santiago", utc(4, 5, 2, 45), true, utc(4, 5, 3, 0), utc(4, 5, 3, 30)},
		{"sat 23:30-00:30 America/Santiago", utc(4, 5, 3, 15), false, time.Time{}, utc(4, 5, 3, 30)},
		{"sat 23:30-00:30 America/Santiago", utc(4, 5, 3, 30), true, utc(4, 5, 4, 30), utc(4, 12, 3, 30)},
		// Australia/Lord_Howe, Sun 2026-04-05: 01:59:59 +11 (Sat 14:59:59Z) is followed by 01:30 +1030 (15:00Z).
		{"01:30-02:00 Australia/Lord_Howe", utc(4, 4, 14, 30), true, utc(4, 4, 15, 30), utc(4, 5, 15, 0)},
		{"01:45-02:00 Australia/Lord_Howe", utc(4, 4, 14, 50), true, utc(4, 4, 15, 0), utc(4, 4, 15, 15)},
		// Australia/Lord_Howe, Sun 2026-10-04: 01:59:59 +1030 (Sat 15:29:59Z) is followed by 02:30 +11 (15:30Z).
		{"02:00-02:30 Australia/Lord_Howe", utc(10, 3, 15, 0), false, time.Time{}, utc(10, 4, 15, 0)},
		{"01:45-02:15 Australia/Lord_Howe", utc(10, 3, 15, 15), true, utc(10, 3, 15, 30), utc(10, 4, 14, 45)},
	} {
		w := mustWindow(t, tc.spec)
		in, end := w.Contains(tc.at)
		next := w.Next(tc.at)
		if in != tc.in || (in && !end.Equal(tc.end)) || !next.Equal(tc.next) {
			z := zoned(w)
			t.Errorf("%s at %s: in %v, end %s, next %s; want in %v, end %s, next %s",
				tc.spec, z(tc.at), in, z(end), z(next), tc.in, z(tc.end), z(tc.next))
		}
	}
}

// zoned writes instants in w's zone, and a zero instant as "-".
func zoned(w Window) func(time.Time) string {
	return func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.In(w.Zone).Format("Mon Jan 2 15:04 MST")
	}
}

// oracle reads a window from the instant's wall clock as text: "15:04:05"
// compares as the clock does, and "24:00:00" is past every wall time.
func oracle(w Window) func(time.Time) bool {
	start := fmt.Sprintf("%02d:%02d:00", w.Start/60, w.Start%60)
	end := fmt.Sprintf("%02d:%02d:00", w.End/60, w.End%60)
	listed := map[string]bool{}
	for _, d := range []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"} {
		listed[d] = len(w.Days) == 0
	}
	for _, d := range w.Days {
		listed[d.String()] = true
	}
	yesterday := map[string]string{"Sunday": "Saturday", "Monday": "Sunday", "Tuesday": "Monday", "Wednesday": "Tuesday",
		"Thursday": "Wednesday", "Friday": "Thursday", "Saturday": "Friday"}
	return func(t time.Time) bool {
		local := t.In(w.Zone)
		day, clock := local.Format("Monday"), local.Format("15:04:05")
		if start < end {
			return listed[day] && clock >= start && clock < end
		}
		return (listed[day] && clock >= start) || (listed[yesterday[day]] && clock < end)
	}
}

// flips are the instants, minute by minute after from, at which the oracle's
// answer changes, until want of them lie past until, or for 15 days.
func flips(w Window, from, until time.Time, want int) []time.Time {
	var out []time.Time
	past := 0
	in := oracle(w)
	was := in(from)
	for t := from.Add(time.Minute); t.Before(from.Add(15*24*time.Hour)) && past < want; t = t.Add(time.Minute) {
		if is := in(t); is != was {
			out = append(out, t)
			was = is
			if t.After(until) {
				past++
			}
		}
	}
	return out
}

// The zones' days of change, minute by minute: whether a window is in
// force, when it ends and when it next starts, against the oracle.
// Every offset and change in these zones is on a whole minute, so a
// minute's steps see every edge.
func TestWindowsMatchTheWallClockMinuteByMinute(t *testing.T) {
	days := []struct {
		zone string
		day  time.Time // an instant a few hours before the change
	}{
		{"America/New_York", utc(3, 8, 0, 0)},
		{"America/New_York", utc(11, 1, 0, 0)},
		{"America/Santiago", utc(9, 5, 12, 0)},
		{"America/Santiago", utc(4, 4, 12, 0)},
		{"America/Havana", utc(3, 7, 12, 0)},
		{"America/Havana", utc(11, 1, 0, 0)},
		{"Australia/Lord_Howe", utc(4, 4, 0, 0)},
		{"Australia/Lord_Howe", utc(10, 3, 0, 0)},
	}
	specs := []string{"00:00-01:00", "00:30-02:00", "01:00-02:30", "01:30-02:30", "02:00-03:00", "01:30-01:45", "01:45-02:15",
		"23:00-24:00", "23:30-00:30", "22:00-02:00", "sun 10:00-11:00", "sun 00:00-24:00", "sat 23:00-01:30", "sun,mon 02:00-01:00"}
	for _, d := range days {
		for _, spec := range specs {
			w := mustWindow(t, spec+" "+d.zone)
			from, until := d.day, d.day.Add(36*time.Hour)
			fl, wall := flips(w, from, until, 2), oracle(w)
			after := func(t time.Time, n int) time.Time { // the nth flip after t
				for _, f := range fl {
					if f.After(t) {
						if n--; n == 0 {
							return f
						}
					}
				}
				return time.Time{}
			}
			bad := 0
			for at := from; at.Before(until) && bad < 3; at = at.Add(time.Minute) {
				want := wall(at)
				wantEnd, wantNext := time.Time{}, after(at, 1)
				if want {
					wantEnd, wantNext = after(at, 1), after(at, 2)
				}
				in, end := w.Contains(at)
				next := w.Next(at)
				if in != want || (in && !end.Equal(wantEnd)) || !next.Equal(wantNext) {
					bad++
					z := zoned(w)
					t.Errorf("%s at %s: in %v, end %s, next %s; the wall clock says in %v, end %s, next %s",
						w, z(at), in, z(end), z(next), want, z(wantEnd), z(wantNext))
				}
			}
		}
	}
}

// The maintenance window: an avoided 01:00-02:30 on the night the
// clock skips 02:00-03:00 holds the job until the clock lands at 03:00.
func TestAMaintenanceWindowHoldsThroughTheSkippedHour(t *testing.T) {
	ws := Windows{"purge": {Avoid: map[string]Window{"vacuum": mustWindow(t, "01:00-02:30 America/New_York"),
		"always": mustWindow(t, "00:00-24:00 UTC")}}}
	for _, at := range []time.Time{utc(3, 8, 6, 0), utc(3, 8, 6, 30), utc(3, 8, 6, 59)} {
		hs := ws.Applying(at, "purge")
		if len(hs) != 2 || hs[1].ID != "maintenance:vacuum" || !hs[1].Expires.Equal(utc(3, 8, 7, 0)) ||
			!strings.Contains(hs[1].Reason, "it ends Sun 03:00 EDT") {
			t.Errorf("at %s: %+v; want the maintenance hold until 03:00 EDT", at.In(ws["purge"].Avoid["vacuum"].Zone), hs)
		}
		if len(hs) != 2 || hs[0].ID != "maintenance:always" || !hs[0].Expires.Equal(utc(3, 9, 0, 0)) ||
			!strings.Contains(hs[0].Reason, "does not end within two weeks") {
			t.Errorf("at %s: %+v; want the all-day window's hold renewed at midnight, saying it does not end", at, hs)
		}
	}
	if hs := ws.Applying(utc(3, 8, 7, 0), "purge"); len(hs) != 1 || hs[0].ID != "maintenance:always" {
		t.Errorf("at 03:00 EDT: %+v; want the maintenance window over", hs)
	}
}

// The controller asks a job's windows at every tick, in every process.
func BenchmarkWindowsApplying(b *testing.B) {
	ws := Windows{"purge": {
		Run:   []Window{mustWindow(b, "mon-fri 01:00-06:00 America/New_York"), mustWindow(b, "sat 02:30-03:00 America/New_York")},
		Avoid: map[string]Window{"weekly-vacuum": mustWindow(b, "sun 01:00-02:30 America/New_York")},
	}, "always": { // the worst case: a window that never ends is looked at for two weeks
		Avoid: map[string]Window{"all-day": mustWindow(b, "00:00-24:00 America/New_York")},
	}}
	for _, at := range []struct {
		name string
		job  string
		t    time.Time
	}{
		{"outside", "purge", utc(3, 4, 17, 0)},
		{"inside", "purge", utc(3, 4, 7, 0)},
		{"maintenance", "purge", utc(3, 8, 6, 45)},
		{"endless", "always", utc(3, 8, 6, 45)},
	} {
		b.Run(at.name, func(b *testing.B) {
			for b.Loop() {
				ws.Applying(at.t, at.job)
			}
		})
	}
}
