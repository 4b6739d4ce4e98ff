// Package benchdoc turns the output of `go test -bench` into the markdown
// table of docs/BENCHMARKS.md: each benchmark with the range of its
// readings, its anchor (the benchmark of the same package named like it
// plus "Anchor", or its workers=1 case), the ratio to the anchor and
// whether the goal set for it is met. `make bench` runs it; the table is
// never edited by hand.
package benchdoc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Result is one benchmark's readings over every run (-count).
type Result struct {
	Pkg  string // import path, as the "pkg:" line gives it
	Name string // without "Benchmark" and the -GOMAXPROCS suffix
	// Metrics maps a unit (ns/op, allocs/op, req/s, ...) to its readings.
	Metrics map[string][]float64
	units   []string // in first-seen order
}

var procs = regexp.MustCompile(`-\d+$`)

// Parse reads `go test -bench` output and returns its benchmarks in
// first-seen order, each run of the same benchmark merged.
func Parse(r io.Reader) ([]*Result, error) {
	var out []*Result
	byKey := map[string]*Result{}
	pkg := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procs.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		key := pkg + "\x00" + name
		res := byKey[key]
		if res == nil {
			res = &Result{Pkg: pkg, Name: name, Metrics: map[string][]float64{}}
			byKey[key] = res
			out = append(out, res)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchdoc: %s: %q: %w", f[0], f[i], err)
			}
			unit := f[i+1]
			if _, seen := res.Metrics[unit]; !seen {
				res.units = append(res.units, unit)
			}
			res.Metrics[unit] = append(res.Metrics[unit], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("benchdoc: read: %w", err)
	}
	return out, nil
}

// Median is the median of unit's readings, and false if there are none.
func (r *Result) Median(unit string) (float64, bool) {
	vs := slices.Clone(r.Metrics[unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2, true
	}
	return vs[len(vs)/2], true
}

// Anchor returns r's anchor among rs: the benchmark of r's package whose
// name, less its "Anchor" suffix, is the longest prefix of r's name; for
// a case "X/workers=N", the case "X/workers=1". Anchors have none.
func Anchor(r *Result, rs []*Result) *Result {
	if strings.HasSuffix(r.Name, "Anchor") {
		return nil
	}
	if base, _, ok := strings.Cut(r.Name, "/workers="); ok {
		if r.Name == base+"/workers=1" {
			return nil
		}
		for _, a := range rs {
			if a.Pkg == r.Pkg && a.Name == base+"/workers=1" {
				return a
			}
		}
		return nil
	}
	var best *Result
	for _, a := range rs {
		stem, ok := strings.CutSuffix(a.Name, "Anchor")
		if ok && a.Pkg == r.Pkg && strings.HasPrefix(r.Name, stem) && (best == nil || len(a.Name) > len(best.Name)) {
			best = a
		}
	}
	return best
}

// Ratio compares r with its anchor a on the unit that matters: the
// throughput (req/s, r over a) when both have it, the sampler's load
// (stmts/s or xacts/s, r over a) when they have that, else the time (ns/op,
// r over a). It reports the unit used, and false if there is none.
func Ratio(r, a *Result) (ratio float64, unit string, ok bool) {
	for _, u := range []string{"req/s", "stmts/s", "xacts/s", "ns/op"} {
		x, okx := r.Median(u)
		y, oky := a.Median(u)
		if okx && oky && y != 0 {
			return x / y, u, true
		}
	}
	return 0, "", false
}

// Goal is a target a benchmark is held to, by name.
type Goal struct {
	Text  string                                             // as the table says it
	Check func(r *Result, ratio float64, hasRatio bool) bool // whether it is met
}

func allocs(r *Result) float64 { v, _ := r.Median("allocs/op"); return v }

var fastAndFree = Goal{"≤ 1.5× anchor, 0 allocs", func(r *Result, ratio float64, ok bool) bool {
	return ok && ratio <= 1.5 && allocs(r) == 0
}}

var constant = Goal{"≤ 1.5× workers=1, one sampler session", func(r *Result, ratio float64, ok bool) bool {
	s, _ := r.Median("sampler-sessions")
	return ok && ratio <= 1.5 && s == 1
}}

// Goals are issue 11's targets, by "package name/benchmark name".
var Goals = map[string]Goal{
	"limit/LimiterWait":         fastAndFree,
	"limit/LimiterWaitParallel": fastAndFree,
	"sidecar/Check": {"≥ 0.8× anchor's req/s", func(_ *Result, ratio float64, ok bool) bool {
		return ok && ratio >= 0.8
	}},
	"throttled/SamplerCost/workers=20":  constant,
	"throttled/SamplerCost/workers=200": constant,
	// Issue 32's rows: exec with its defaults on an idle primary against
	// a plain loop at the same rate, and beside a light foreground.
	"throttled/IdlePrimary": {"of-ceiling ≥ 0.9", func(r *Result, _ float64, _ bool) bool {
		v, ok := r.Median("of-ceiling")
		return ok && v >= 0.9
	}},
	"throttled/QuietPrimary": {"exec-p99-on/alone ≤ 1.10, of-oracle ≥ 0.8", func(r *Result, _ float64, _ bool) bool {
		p, okp := r.Median("exec-p99-on/alone")
		o, oko := r.Median("of-oracle")
		return okp && oko && p <= 1.10 && o >= 0.8
	}},
}

// shortPkg is the last element of an import path.
func shortPkg(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// Table renders rs as a markdown table: per benchmark the median and range
// of ns/op (or its own metrics), allocs/op, the anchor, the ratio and the
// goal.
func Table(rs []*Result) string {
	var b strings.Builder
	b.WriteString("| benchmark | readings (median, min–max over runs) | allocs/op | anchor | ratio | goal | met |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		name := shortPkg(r.Pkg) + "/" + r.Name
		var cells []string
		for _, u := range r.units {
			if u == "allocs/op" || u == "B/op" || (u == "ns/op" && allZero(r.Metrics[u])) {
				continue
			}
			cells = append(cells, reading(r.Metrics[u], u))
		}
		al := "–"
		if _, ok := r.Metrics["allocs/op"]; ok {
			al = num(allocs(r))
		}
		anchor, ratio, goal, met := "–", "–", "–", "–"
		a := Anchor(r, rs)
		rt, unit, hasRatio := 0.0, "", false
		if a != nil {
			anchor = a.Name
			if rt, unit, hasRatio = Ratio(r, a); hasRatio {
				ratio = fmt.Sprintf("%.2f× (%s)", rt, unit)
			}
		}
		if g, ok := Goals[name]; ok {
			goal, met = g.Text, "no"
			if g.Check(r, rt, hasRatio) {
				met = "yes"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", name, strings.Join(cells, "; "), al, anchor, ratio, goal, met)
	}
	return b.String()
}

func allZero(vs []float64) bool {
	return !slices.ContainsFunc(vs, func(v float64) bool { return v != 0 })
}

func reading(vs []float64, unit string) string {
	lo, hi := slices.Min(vs), slices.Max(vs)
	sorted := slices.Clone(vs)
	slices.Sort(sorted)
	med := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		med = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	if lo == hi {
		return num(med) + " " + unit
	}
	return fmt.Sprintf("%s %s (%s–%s)", num(med), unit, num(lo), num(hi))
}

// num prints v with three significant digits, as an integer when large.
func num(v float64) string {
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// ErrNoMarkers is returned by Splice when doc lacks the section's markers.
var ErrNoMarkers = errors.New("benchdoc: markers not found")

// Splice replaces what lies between "<!-- section:begin -->" and
// "<!-- section:end -->" in doc with body.
func Splice(doc, section, body string) (string, error) {
	begin, end := "<!-- "+section+":begin -->", "<!-- "+section+":end -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("%w: %s … %s", ErrNoMarkers, begin, end)
	}
	return doc[:i+len(begin)] + "\n" + strings.TrimRight(body, "\n") + "\n" + doc[j:], nil
}
