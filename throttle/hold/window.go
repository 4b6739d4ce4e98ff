package hold

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A Window is a weekly stretch of wall-clock time in a named time zone,
// such as "mon-fri 01:00-06:00 Europe/Istanbul": a job's run window (it
// runs only inside one), or a maintenance window (jobs that avoid it never
// run inside it). The controller applies windows as holds (source
// window, see [Windows]), so they show wherever holds do: the job's
// status, the API, the CLI, the metrics and the dashboards' annotations.
//
// A window is the set of instants whose wall clock in its zone (weekday,
// hour, minute, second) lies in it: from Start, inclusive, to End,
// exclusive, on a listed day. A window that ends at or before it starts
// runs past midnight (22:00-04:00) and belongs to the day it starts on:
// from Start to midnight on a listed day, and from midnight to End on the
// day after one. 24:00 is the end of the day.
//
// So across a change of the clock (daylight saving) a window follows the
// wall clock. An hour the clock skips does not happen: on the night
// America/New_York jumps from 02:00 EST to 03:00 EDT, 02:00-03:00 is not
// in force at all, and 01:30-02:30 is in force from 01:30 EST until the
// jump, the first instant at or past 02:30 on the wall clock. A day with
// no midnight (the clock jumps from 00:00 to 01:00) still happens, from
// the jump. An hour the clock repeats happens twice: on the night it goes
// back from 02:00 EDT to 01:00 EST, 01:30-01:45 is in force in both
// passes, and 01:00-02:00 for two hours.
type Window struct {
	// Days it starts on; empty for every day.
	Days []time.Weekday
	// Start and End are minutes after midnight, End up to 24*60.
	Start, End int
	Zone       *time.Location
}

var weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// ParseWindow reads "[days] HH:MM-HH:MM ZONE": days as mon,wed or mon-fri
// (three-letter English names, any case), a time zone of the IANA
// database (UTC, Europe/Istanbul). Its errors say what is wrong with
// which part.
func ParseWindow(s string) (Window, error) {
	fields := strings.Fields(s)
	var w Window
	bad := func(format string, args ...any) (Window, error) {
		return Window{}, fmt.Errorf("window %q: "+format, append([]any{s}, args...)...)
	}
	switch len(fields) {
	case 2:
	case 3:
		days, err := parseDays(fields[0])
		if err != nil {
			return bad("%v", err)
		}
		w.Days, fields = days, fields[1:]
	default:
		return bad(`want "[days] HH:MM-HH:MM zone", such as "mon-fri 01:00-06:00 Europe/Istanbul"`)
	}
	from, to, ok := strings.Cut(fields[0], "-")
	if !ok {
		return bad("times %q: want HH:MM-HH:MM", fields[0])
	}
	var err error
	if w.Start, err = clock(from, false); err != nil {
		return bad("start: %v", err)
	}
	if w.End, err = clock(to, true); err != nil {
		return bad("end: %v", err)
	}
	if w.Start == w.End {
		return bad("starts and ends at %s: empty", from)
	}
	if fields[1] == "Local" || fields[1] == "" {
		return bad("zone %q: name one (UTC, Europe/Istanbul): the local zone differs between machines", fields[1])
	}
	if w.Zone, err = time.LoadLocation(fields[1]); err != nil {
		return bad("zone %q: %v", fields[1], err)
	}
	return w, nil
}

func parseDays(s string) ([]time.Weekday, error) {
	var out []time.Weekday
	for _, part := range strings.Split(strings.ToLower(s), ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, ok := weekdays[from]
		if !ok {
			return nil, fmt.Errorf("day %q: want sun, mon, tue, wed, thu, fri or sat", from)
		}
		b := a
		if isRange {
			if b, ok = weekdays[to]; !ok {
				return nil, fmt.Errorf("day %q: want sun, mon, tue, wed, thu, fri or sat", to)
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
			if d == b {
				break
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// clock reads HH:MM as minutes after midnight; 24:00 only as an end.
func clock(s string, end bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(h) != 2 || len(m) != 2 || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && (mm != 0 || !end)) {
		return 0, fmt.Errorf("%q: want HH:MM from 00:00 to 23:59 (24:00 as an end)", s)
	}
	return hh*60 + mm, nil
}

// String writes w as ParseWindow reads it.
func (w Window) String() string {
	var days []string
	for _, d := range w.Days {
		days = append(days, strings.ToLower(d.String()[:3]))
	}
	out := fmt.Sprintf("%02d:%02d-%02d:%02d %s", w.Start/60, w.Start%60, w.End/60, w.End%60, w.Zone)
	if len(days) > 0 && len(days) < 7 {
		out = strings.Join(days, ",") + " " + out
	}
	return out
}

// horizon is how far ahead Contains and Next look for a window's edge:
// two weeks, so a weekly window that a change of the clock skips once is
// still found the week after.
const horizon = 15 * 24 * time.Hour

// listed reports whether w names day (a window of no days names all).
func (w Window) listed(day time.Weekday) bool {
	return len(w.Days) == 0 || slices.Contains(w.Days, day)
}

// inForce reports whether w is in force at t: whether t's wall clock in
// w's zone (weekday, hour, minute, second) lies in w. It is the one
// definition of a window; Contains and Next find where its answer
// changes.
func (w Window) inForce(t time.Time) bool {
	local := t.In(w.Zone)
	hh, mm, ss := local.Clock()
	sec := hh*3600 + mm*60 + ss // whole seconds: the edges are whole minutes
	day := local.Weekday()
	if w.Start < w.End {
		return w.listed(day) && sec >= w.Start*60 && sec < w.End*60
	}
	// Past midnight: from Start on a listed day, and until End on the
	// day after one.
	return (w.listed(day) && sec >= w.Start*60) || (w.listed((day+6)%7) && sec < w.End*60)
}

// first is the first instant after t, and within the horizon, at which
// the wall clock in w's zone reaches one of the minutes of the day in
// marks, or the zone's offset changes, that satisfies ok. Between two such
// instants the wall clock runs on without reaching a mark, so anything
// that depends only on the wall clock's position against the marks (such
// as inForce, given marks Start and End) changes only at one of them.
func (w Window) first(t time.Time, marks []int, ok func(time.Time) bool) (time.Time, bool) {
	limit := t.Add(horizon)
	for cur := t.In(w.Zone); cur.Before(limit); {
		_, off := cur.Zone()
		_, next := cur.ZoneBounds() // the offset holds over [cur, next)
		transition := !next.IsZero() && next.Before(limit)
		if !transition || !next.After(cur) {
			next, transition = limit, false
		}
		// The wall clock over [cur, next), as seconds of a clock at UTC.
		from, to := cur.Unix()+int64(off), next.Unix()+int64(off)
		for day := floorDiv(from, 86400); day <= floorDiv(to, 86400); day++ {
			for _, m := range marks {
				c := time.Unix(day*86400+int64(m)*60-int64(off), 0).In(w.Zone)
				if c.After(t) && !c.Before(cur) && c.Before(next) && ok(c) {
					return c, true
				}
			}
		}
		if transition && ok(next) {
			return next.In(w.Zone), true
		}
		cur = next.In(w.Zone)
	}
	return time.Time{}, false
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// change is the first instant after t at which inForce's answer differs
// from its answer at t; false when there is none within the horizon.
func (w Window) change(t time.Time) (time.Time, bool) {
	in := w.inForce(t)
	return w.first(t, []int{min(w.Start, w.End), max(w.Start, w.End)}, func(c time.Time) bool { return w.inForce(c) != in })
}

// Contains reports whether w is in force at t (t's wall clock lies in
// w), and when it stops being: the first instant after t outside it. On a
// night the clock skips past the window's end, that is the instant the
// clock lands on. A window that does not stop within two weeks (every day
// 00:00-24:00) is given the next local midnight instead, so a hold made
// of it is renewed each day.
func (w Window) Contains(t time.Time) (bool, time.Time) {
	in, end, _ := w.contains(t)
	return in, end
}

// contains is Contains, and whether the end is the window's own.
func (w Window) contains(t time.Time) (in bool, end time.Time, ends bool) {
	if !w.inForce(t) {
		return false, time.Time{}, false
	}
	if end, ok := w.change(t); ok {
		return true, end, true
	}
	y, m, d := t.In(w.Zone).Date()
	end, _ = w.first(t, []int{0}, func(c time.Time) bool {
		cy, cm, cd := c.Date()
		return cy != y || cm != m || cd != d
	})
	if end.IsZero() {
		end = t.Add(24 * time.Hour)
	}
	return true, end, false
}

// Next is the first instant after t at which w comes into force, after
// the occurrence t is in if it is in one; zero when none is within two
// weeks. On a night the clock skips past the window's start, it is the
// instant the clock lands on.
func (w Window) Next(t time.Time) time.Time {
	if w.inForce(t) {
		end, ok := w.change(t)
		if !ok {
			return time.Time{}
		}
		t = end
	}
	start, _ := w.change(t)
	return start
}

// JobWindows are one job's windows.
type JobWindows struct {
	// Run: the job runs only inside one of them; none means always.
	Run []Window
	// Avoid are named maintenance windows the job never runs inside.
	Avoid map[string]Window
}

// SourceWindow is the source of the holds windows make. No request may
// carry it: only [Windows] makes such holds.
const SourceWindow Source = "window"

// Windows turns each job's windows, keyed by the job's name, into holds:
// a throttle.HoldSource, to be one of the sources the controller asks. A
// job outside its run windows is held until the next one opens; a job
// inside a maintenance window it avoids, until that ends. The holds' IDs
// are stable ("window:<job>", "maintenance:<name>"), so one is the same
// hold for as long as it lasts.
type Windows map[string]JobWindows

// Applying reports the holds the named job's windows make at now.
func (ws Windows) Applying(now time.Time, job string) []Hold {
	jw, ok := ws[job]
	if !ok {
		return nil
	}
	var out []Hold
	if len(jw.Run) > 0 {
		inside := false
		next := time.Time{}
		var names []string
		for _, w := range jw.Run {
			names = append(names, w.String())
			if w.inForce(now) {
				inside = true
				break
			}
			if n := w.Next(now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
				next = n
			}
		}
		if !inside {
			opens := "it opens " + next.In(jw.Run[0].Zone).Format("Mon 15:04 MST")
			if next.IsZero() {
				next, opens = now.Add(7*24*time.Hour), "it does not open within two weeks"
			}
			out = append(out, Hold{ID: "window:" + job, Scope: OneJob(job), Source: SourceWindow, Actor: "throttled",
				Reason:  "outside its run window (" + strings.Join(names, "; ") + "); " + opens,
				Created: now, Expires: next})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(jw.Avoid)) {
		w := jw.Avoid[name]
		if in, end, ends := w.contains(now); in {
			until := "it ends " + end.In(w.Zone).Format("Mon 15:04 MST")
			if !ends {
				until = "it does not end within two weeks"
			}
			out = append(out, Hold{ID: "maintenance:" + name, Scope: OneJob(job), Source: SourceWindow, Actor: "throttled",
				Reason:  "inside maintenance window " + name + " (" + w.String() + "); " + until,
				Created: now, Expires: end})
		}
	}
	return out
}
