package throttle

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
// A window that ends at or before it starts runs past midnight
// (22:00-04:00); it belongs to the day it starts on. 24:00 is the end of
// the day. Days the clock skips or repeats (daylight saving) are read as
// the zone's wall clock: a window 02:30-03:00 on a night the clock jumps
// from 02:00 to 03:00 does not happen.
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

// span is one occurrence of w: [from, to).
type span struct{ from, to time.Time }

// spans are w's occurrences that start from a day before t's to a week
// after.
func (w Window) spans(t time.Time) []span {
	local := t.In(w.Zone)
	y, m, d := local.Date()
	var out []span
	for i := -1; i <= 8; i++ {
		day := time.Date(y, m, d+i, 0, 0, 0, 0, w.Zone)
		if len(w.Days) > 0 && !slices.Contains(w.Days, day.Weekday()) {
			continue
		}
		end := w.End
		if end <= w.Start {
			end += 24 * 60 // past midnight
		}
		from := time.Date(day.Year(), day.Month(), day.Day(), w.Start/60, w.Start%60, 0, 0, w.Zone)
		to := time.Date(day.Year(), day.Month(), day.Day(), end/60, end%60, 0, 0, w.Zone)
		if to.After(from) {
			out = append(out, span{from, to})
		}
	}
	return out
}

// Contains reports whether t is inside one of w's occurrences, and when
// that one ends.
func (w Window) Contains(t time.Time) (bool, time.Time) {
	for _, s := range w.spans(t) {
		if !t.Before(s.from) && t.Before(s.to) {
			return true, s.to
		}
	}
	return false, time.Time{}
}

// Next is the start of w's next occurrence after t; zero when none is
// within a week (a window of no days).
func (w Window) Next(t time.Time) time.Time {
	for _, s := range w.spans(t) {
		if s.from.After(t) {
			return s.from
		}
	}
	return time.Time{}
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

// Windows turns each job's windows into holds: a HoldSource, to be one of
// the sources the controller asks. A job outside its run windows is held
// until the next one opens; a job inside a maintenance window it avoids,
// until that ends. The holds' IDs are stable ("window:<job>",
// "maintenance:<name>"), so one is the same hold for as long as it lasts.
type Windows map[Job]JobWindows

// Applying reports the holds j's windows make at now.
func (ws Windows) Applying(now time.Time, j Job) []Hold {
	jw, ok := ws[j]
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
			if in, _ := w.Contains(now); in {
				inside = true
				break
			}
			if n := w.Next(now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
				next = n
			}
		}
		if !inside {
			if next.IsZero() {
				next = now.Add(7 * 24 * time.Hour)
			}
			out = append(out, Hold{ID: "window:" + string(j), Scope: OneJob(j), Source: SourceWindow, Actor: "throttled",
				Reason:  "outside its run window (" + strings.Join(names, "; ") + "); it opens " + next.In(jw.Run[0].Zone).Format("Mon 15:04 MST"),
				Created: now, Expires: next})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(jw.Avoid)) {
		w := jw.Avoid[name]
		if in, end := w.Contains(now); in {
			out = append(out, Hold{ID: "maintenance:" + name, Scope: OneJob(j), Source: SourceWindow, Actor: "throttled",
				Reason:  "inside maintenance window " + name + " (" + w.String() + "); it ends " + end.In(w.Zone).Format("Mon 15:04 MST"),
				Created: now, Expires: end})
		}
	}
	return out
}
