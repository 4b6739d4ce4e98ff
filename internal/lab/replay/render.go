package replay

import (
	"cmp"
	"fmt"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// render.go: the replay section of docs/BENCHMARKS.md, from every
// block's results file present, and one PNG per block.

// PolicyResult is one policy's verdicts in one block.
type PolicyResult struct {
	Policy string
	// P99 is the verdict on the pairs' p99 ratio; Exceed on the share of
	// the policy's transactions over the alone windows' p99, over 1 %.
	P99, Exceed Verdict
	// RowsPerSec is the median of the pairs' rows per second (for a block
	// without foreground, of the policy's windows).
	RowsPerSec float64
	// OfOracle is RowsPerSec over the hindsight oracle's; OfCeiling over
	// unthrottled's (the ceiling, in a block without foreground). 0 where
	// there is none.
	OfOracle, OfCeiling float64
	// Frontier is a closed-loop policy's standing against the fixed
	// rates' curve (StandingOf); zero for the others.
	Frontier Standing
	// ClientP99 and AloneClientP99 are the measuring process's own wait's
	// p99 (Second.Client) over the policy's windows and over their alone
	// neighbours, pooled; TotalP99 and AloneTotalP99 the whole latency's.
	// 0 in a block without the split.
	ClientP99, AloneClientP99, TotalP99, AloneTotalP99 float64
	// ExtraCritical is the seconds at or over critical in the policy's
	// windows beyond those the neighbouring alone windows spent, scaled
	// to as many seconds.
	ExtraCritical float64
	// Stolen is the pairs left out for steal.
	Stolen int
}

// BlockResult is a block's verdicts.
type BlockResult struct {
	Block *Block
	// AA is the instrument's own check; AAErr says how it failed.
	AA    Verdict
	AAErr error
	// Oracle is the hindsight oracle: the rows per second, read on the
	// fixed rates' curves, at a p99 ratio of the goal, and its rate.
	Oracle, OracleRate float64
	OracleOK           bool
	Fixed              []RatePoint
	// Curve is the open-loop policies (the fixed rates, unthrottled at
	// the top) as a curve of ratio against rows, with the oracle's
	// interval (FrontierOf).
	Curve    Frontier
	Policies []PolicyResult
	// StealDropped is the seconds over the steal limit, of all.
	StealDropped int
	MedianSteal  float64
}

// Evaluate turns a block into its verdicts under g.
func Evaluate(b *Block, g Goals) BlockResult {
	g.fill()
	r := BlockResult{Block: b}
	var steals []float64
	for _, s := range b.Seconds {
		if s.Steal >= 0 {
			steals = append(steals, s.Steal)
		}
		if g.stolen(s) {
			r.StealDropped++
		}
	}
	if len(steals) > 0 {
		r.MedianSteal = medianOf(steals)
	}
	sc, _ := scenarioByName(b.Scenario)
	rowsOf := func(label string, pairs []Pair) float64 {
		if !sc.NoForeground {
			// The mean, as the frontier reads it: rows over seconds.
			var sum float64
			for _, p := range pairs {
				sum += p.RowsPerSec
			}
			if len(pairs) == 0 {
				return 0
			}
			return sum / float64(len(pairs))
		}
		var xs []float64
		for _, w := range b.Windows {
			if w.Label() != label {
				continue
			}
			var rows int64
			for _, s := range b.Seconds[w.Start+w.Dropped : w.End] {
				rows += s.Rows
			}
			xs = append(xs, float64(rows)/float64(w.End-w.Start-w.Dropped))
		}
		if len(xs) == 0 {
			return 0
		}
		return medianOf(xs)
	}
	for _, label := range b.Policies() {
		pairs, stolen := Pairs(b, label, g)
		pr := PolicyResult{Policy: label, Stolen: stolen,
			P99:        DecideP99(pairs, g),
			Exceed:     DecideExceed(pairs, g),
			RowsPerSec: rowsOf(label, pairs)}
		pr.ClientP99, pr.AloneClientP99, pr.TotalP99, pr.AloneTotalP99 = splitP99s(b, label, g)
		pol, alone := Critical(b, label, g)
		pr.ExtraCritical = max(0, pol-alone)
		if strings.HasPrefix(label, PolicyFixed+"-") {
			i := slices.IndexFunc(b.Windows, func(w Window) bool { return w.Label() == label })
			r.Fixed = append(r.Fixed, RatePoint{Rate: b.Windows[i].Rate, Ratio: pr.P99.Median, RowsPerSec: pr.RowsPerSec})
		}
		r.Policies = append(r.Policies, pr)
	}
	if slices.Contains(b.Policies(), PolicyAA) {
		r.AA, r.AAErr = CheckAA(b, g)
		// Every other policy's verdicts must clear the instrument's own
		// error in this block: see Guard.
		var aaExceed Verdict
		for _, p := range r.Policies {
			if p.Policy == PolicyAA {
				aaExceed = p.Exceed
			}
		}
		for i := range r.Policies {
			if p := &r.Policies[i]; p.Policy != PolicyAA {
				p.P99, p.Exceed = Guard(p.P99, r.AA, g), Guard(p.Exceed, aaExceed, g)
			}
		}
	}
	if len(r.Fixed) > 0 && !sc.NoForeground {
		r.Oracle, r.OracleRate, r.OracleOK = Oracle(r.Fixed, g.P99Ratio)
		r.Curve = FrontierOf(b, g)
		if r.Curve.OK {
			r.Oracle = r.Curve.Oracle
		}
		for i := range r.Policies {
			if p := &r.Policies[i]; p.Policy != PolicyAA && !openLoop(policyOf(p.Policy)) {
				p.Frontier = StandingOf(b, p.Policy, g)
				// As the p99 verdicts: a standing that does not clear the
				// a/a's own excursion in this block is undecided.
				p.Frontier.Verdict = Guard(p.Frontier.Verdict, r.AA, g)
			}
		}
	}
	ceiling := 0.0
	for _, p := range r.Policies {
		if p.Policy == PolicyUnthrottled {
			ceiling = p.RowsPerSec
		}
	}
	for i := range r.Policies {
		p := &r.Policies[i]
		if r.OracleOK && r.Oracle > 0 {
			p.OfOracle = p.RowsPerSec / r.Oracle
		}
		if ceiling > 0 {
			p.OfCeiling = p.RowsPerSec / ceiling
		}
	}
	return r
}

// policyOf is the policy a label names: fixed for fixed-N.
func policyOf(label string) string {
	if strings.HasPrefix(label, PolicyFixed+"-") {
		return PolicyFixed
	}
	return label
}

// splitP99s is the p99 of the measuring process's own wait and of the
// whole latency, in label's windows and in their alone neighbours, each
// pooled, milliseconds; zeros in a block without the split.
func splitP99s(b *Block, label string, g Goals) (client, aloneClient, total, aloneTotal float64) {
	pol, alone := newPairSide(), newPairSide()
	seen := map[int]bool{}
	for i, w := range b.Windows {
		if w.Policy == PolicyAlone || w.Label() != label {
			continue
		}
		pol.add(b, w, g)
		for _, j := range AloneNeighbours(b, i) {
			if !seen[j] {
				seen[j] = true
				alone.add(b, b.Windows[j], g)
			}
		}
	}
	if pol.client.Count() == 0 || alone.client.Count() == 0 {
		return 0, 0, 0, 0
	}
	ms := func(h *Histogram) float64 { return interpQuantileUs(h, 0.99) / 1e3 }
	return ms(pol.client), ms(alone.client), ms(pol.total), ms(alone.total)
}

// Section renders the replay section from every block: how it was made,
// the overview, then a table per scenario, and last the blocks of a/a
// alone at more pairs (long; see LongAASection). command is what ran or
// rendered it; results the directory of the results files it read; calib
// the calibration the blocks read.
func Section(blocks, long []*Block, g Goals, calib *MachineCalibration, command, results, pngDir string) string {
	g.fill()
	var b strings.Builder
	fmt.Fprintf(&b, "Generated by `%s` from the results files of each scenario (%s/<scenario>.json), never edited by hand", command, filepath.ToSlash(results))
	if filepath.Clean(results) == filepath.Clean(DefaultResults) {
		b.WriteString("; `make replay SCENARIO=<name>` runs one scenario again and merges it")
	}
	b.WriteString(".")
	if calib != nil {
		fmt.Fprintf(&b, " Calibration (docs/replay/calibration.json, `--calibrate` measures it again): %.0f tx/s on %d cores, %.0f GiB, PostgreSQL %s, measured %s (repeats %s).",
			calib.Rate, calib.Cores, calib.MemoryGiB, calib.PostgreSQL, calib.At.UTC().Format("2006-01-02"), joinRates(calib.Repeats))
	}
	b.WriteString("\n\n")
	fmt.Fprintf(&b, `How to read it. Each scenario ran as one block on the throwaway primary and streaming replica: the
foreground (the pgbench-like mix, open loop at the calibrated rate, scaled by the scenario) and the scenario's
disturbance ran throughout, while windows where one policy's cleanup job worked alternated with windows of the
foreground alone. A closed-loop policy's window (and a/a's) is at least three times adaptive's step response
(the table above), so the controller is judged where it acts and not on readings left from its neighbours;
open-loop windows (unthrottled, the fixed rates) and alone windows are shorter. Each policy's windows form one
stretch: the controllers and a/a first, in a seeded random order, before any other job has written (a
controller's sampler runs through the whole block, and would learn its job-free baseline from another policy's
writes), then unthrottled, whose windows set the fixed rates, then the fixed rates. Every policy's job, client
and sampler was open from the start, and each job cleaned where the last window left off. A **pair** is one
policy window against the alone windows on either side of it; the first %s of each alone window are left out
(the last window's batch commits and its WAL is flushed there; after a/a's too, so a/a is judged exactly as a
policy is), and so is every second in which the hypervisor
took over %.0f %% of the CPU time wanted (steal, /proc/stat). The pair's autovacuum wakes every `+AutovacuumNaptime+`, not
every minute: the foreground updates a few branch rows thousands of times a second, and over the default
minute its own p99 rose tenfold and more with no job at all, falling when autovacuum vacuumed those tables
(blocks from before 2026-12-07 ran with the minute).

Each transaction's latency is split in two: the **client** part is the measuring process's own wait (its
lateness behind the schedule, and a free worker's wake-up: both wait for this machine's CPU, which the job's
backend also takes), the **server** part the rest (waiting for a worker busy on the database, the pool's
connection, the round trips to the commit's answer). A user of a real primary runs the application on other
machines and sees the server part; the verdicts judge it. The **client p99** column shows the client part's p99
in the policy's windows and in their alone neighbours.

The **p99 ratio** is the p99 of the policy windows' transactions pooled over that of their alone neighbours'
pooled; the **share over** is the share of its transactions slower than the neighbours' own p99, over 1 %%.
With fewer than %d pairs (long windows) each pools its pairs; with more (short windows) it is the
median of the pairs' ratios, which one stalled window moves by one place. Each is decided with a %.0f %%
bootstrap interval that resamples whole pairs: **met** when the interval lies at
or under %.2f, **not met** when it lies above, else **undecided** (and with fewer than %d pairs). **a/a** is a
window in which no job runs, judged exactly as a policy is: the instrument's own check (met, with an interval
narrower than ±10 %%). Every other policy's interval is then widened by the a/a's excursion in the same block
(its low end divided by the a/a's high end where that is over 1, its high end by the a/a's low end where that
is under 1): a verdict must clear the noise the instrument reads with no job at all, or it is undecided.

The **frontier** is the open-loop policies as a curve of p99 ratio against rows per second: the fixed rates,
and unthrottled at its top (each one's pairs pooled, an isotonic fit from 0 rows at 1.0, flat past
unthrottled, so no policy is held to a fixed rate's harm at more rows than that rate cleaned); the **oracle** is the rows per second at a ratio of
%.2f on it, and **rows/oracle** a policy's over it (goal at least 0.8). A closed-loop policy's **frontier**
verdict is its pooled ratio over the curve's at its own rows per second: met where the interval lies at or
under 1 (on or beyond the frontier), not met where it lies over, its interval widened by the a/a's excursion
as the p99 verdicts' are. Both intervals resample the policy's pairs and every fixed rate's at once. **Extra s ≥ critical** is the seconds the independent sampler read primary_load at
or over critical in the policy's windows beyond its alone neighbours' (goal 0). In a scenario without
foreground, **of ceiling** is the rows per second over unthrottled's.
`, plural(slices.DeleteFunc(slices.Clone(blocks), func(b *Block) bool { return dropOf(b) < 0 }), func(b *Block) int { return dropOf(b) }, "s"),
		100*g.MaxSteal, MedianPairs, 100*g.Confidence, g.P99Ratio, g.MinPairs, g.P99Ratio)
	evals := make([]BlockResult, len(blocks))
	for i, blk := range blocks {
		evals[i] = Evaluate(blk, g)
	}
	b.WriteString(Overview(evals, g))
	for i, blk := range blocks {
		r := evals[i]
		sc, _ := scenarioByName(blk.Scenario)
		fmt.Fprintf(&b, "\n### %s\n\n%s. ", blk.Scenario, upperFirst(sc.Description))
		fmt.Fprintf(&b, "%d windows: %s (%s of them), foreground %.0f tx/s; the block took %s, run %s. Median steal %.1f %%; %d of %d seconds over the steal limit.",
			len(blk.Windows), layoutOf(blk), time.Duration(blk.Windows[len(blk.Windows)-1].End)*time.Second, blk.Rate, blk.Took, blk.Started.UTC().Format("2006-01-02 15:04"), 100*r.MedianSteal, r.StealDropped, len(blk.Seconds))
		if len(blk.Finished) > 0 {
			fmt.Fprintf(&b, " Ran out of old rows: %s (their rows per second understate them).", strings.Join(blk.Finished, ", "))
		}
		if blk.EventErrors != "" {
			fmt.Fprintf(&b, " The disturbance met: %s.", blk.EventErrors)
		}
		b.WriteString("\n\n")
		if slices.Contains(blk.Policies(), PolicyAA) {
			if r.AAErr != nil {
				fmt.Fprintf(&b, "Instrument check (a/a): **failed**: %v.\n\n", r.AAErr)
			} else {
				fmt.Fprintf(&b, "Instrument check (a/a): **passed**, %s.\n\n", r.AA)
			}
		}
		if whys := WhyShares(blk, PolicyAdaptive); whys != "" {
			fmt.Fprintf(&b, "What held adaptive's job, by its seconds (its status code, and the binding signal): %s.\n\n", whys)
		}
		if r.Curve.OK && !sc.NoForeground {
			var pts []string
			for _, f := range r.Curve.Points {
				pts = append(pts, fmt.Sprintf("%s: ratio %.2f [%.2f, %.2f] at %.0f rows/s (%d pairs)", f.Label, f.Ratio, f.Low, f.High, f.RowsPerSec, f.Pairs))
			}
			fmt.Fprintf(&b, "Frontier: %s. Oracle: %.0f rows/s [%.0f, %.0f].\n\n", strings.Join(pts, "; "), r.Curve.Oracle, r.Curve.OracleLow, r.Curve.OracleHigh)
		} else if len(r.Fixed) > 0 && !sc.NoForeground {
			fmt.Fprintf(&b, "Oracle: none.\n\n")
		}
		if sc.NoForeground {
			b.WriteString("| policy | rows/s | of ceiling (unthrottled) | extra s ≥ critical |\n|---|---:|---:|---:|\n")
			for _, p := range r.Policies {
				if p.Policy == PolicyAA {
					continue
				}
				fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.1f |\n", bold(p.Policy), p.RowsPerSec, p.OfCeiling, p.ExtraCritical)
			}
		} else {
			b.WriteString("| policy | p99 ratio (server) | share over alone's p99 | client p99 ms, windows / alone | rows/s | rows/oracle | frontier | extra s ≥ critical | pairs (left out for steal) |\n|---|---|---|---|---:|---|---|---:|---:|\n")
			for _, p := range r.Policies {
				of, front := "-", "-"
				if r.OracleOK && p.Policy != PolicyAA {
					of = fmt.Sprintf("%.2f", p.OfOracle)
				}
				if p.Frontier.Pairs > 0 {
					front = cell(p.Frontier.Verdict)
					if verdictFinite(p.Frontier.OfOracle) {
						of = fmt.Sprintf("%.2f [%.2f, %.2f]", p.Frontier.OfOracle, p.Frontier.OfOracleLow, p.Frontier.OfOracleHigh)
					}
				}
				client := "-"
				if p.AloneClientP99 > 0 {
					client = fmt.Sprintf("%.2f / %.2f", p.ClientP99, p.AloneClientP99)
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f | %s | %s | %.1f | %d (%d) |\n", bold(p.Policy), cell(p.P99), cell(p.Exceed), client, p.RowsPerSec, of, front, p.ExtraCritical, p.P99.Pairs, p.Stolen)
			}
			if note := clientNote(r); note != "" {
				b.WriteString("\n" + note + "\n")
			}
		}
		if pngDir != "" {
			fmt.Fprintf(&b, "\n![%s](%s)\n", blk.Scenario, filepath.ToSlash(filepath.Join(pngDir, blk.Scenario+".png")))
		}
	}
	b.WriteString(LongAASection(long, evals, g))
	return b.String()
}

// layoutOf describes a block's windows: its Layout, or one length for
// blocks recorded before it had one.
func layoutOf(b *Block) string {
	if b.Layout != nil && b.ClientNice != 0 {
		return fmt.Sprintf("%s; the measuring process at nice %d", b.Layout, b.ClientNice)
	}
	if b.Layout != nil {
		return b.Layout.String()
	}
	return fmt.Sprintf("every window %d s", b.WindowSeconds)
}

// clientNote says, for each policy whose windows raised the client part's
// p99 by more than a tenth of the whole p99's excess over alone, by how
// much: where the instrument measured itself.
func clientNote(r BlockResult) string {
	var over []string
	for _, p := range r.Policies {
		if p.AloneClientP99 <= 0 || p.Policy == PolicyAA {
			continue
		}
		excess, client := p.TotalP99-p.AloneTotalP99, p.ClientP99-p.AloneClientP99
		if excess > 0 && client > excess/10 {
			over = append(over, fmt.Sprintf("%s (client +%.2f ms of +%.2f ms)", p.Policy, client, excess))
		}
	}
	if len(over) == 0 {
		return "The client part rose by no more than a tenth of the whole p99's excess over alone in any policy's windows."
	}
	return "The client part rose by more than a tenth of the whole p99's excess over alone in: " + strings.Join(over, ", ") + "; the server-part verdicts leave it out."
}

func cell(v Verdict) string {
	if v.Pairs == 0 || math.IsNaN(v.Median) {
		return "-"
	}
	return fmt.Sprintf("**%s** %.2f [%.2f, %.2f]", v.Outcome, v.Median, v.Low, v.High)
}

func bold(policy string) string {
	if policy == PolicyAdaptive || policy == PolicyAdaptiveLoad || policy == PolicyAdaptiveTail || policy == PolicyAdaptiveHeld || policy == PolicyAdaptiveApp {
		return "**" + policy + "**"
	}
	return policy
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func joinRates(rs []float64) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%.0f", r))
	}
	return strings.Join(s, ", ")
}

// dropOf is the seconds a block's alone windows leave out (the most any
// of them does: see evenAloneDrops); -1 for a block without them (no
// foreground).
func dropOf(b *Block) int {
	drop := -1
	for _, w := range b.Windows {
		if w.Policy == PolicyAlone {
			drop = max(drop, w.Dropped)
		}
	}
	return drop
}

// plural names the distinct values of f over blocks, such as "2 s" or
// "2 s or 3 s".
func plural(blocks []*Block, f func(*Block) int, unit string) string {
	var vs []int
	for _, b := range blocks {
		if v := f(b); !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	var s []string
	for _, v := range vs {
		s = append(s, fmt.Sprintf("%d %s", v, unit))
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " or ")
}

var policyColors = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255}, color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255}, color.RGBA{R: 140, G: 86, B: 75, A: 255}, color.RGBA{R: 227, G: 119, B: 194, A: 255},
	color.RGBA{R: 188, G: 189, B: 34, A: 255}, color.RGBA{R: 23, G: 190, B: 207, A: 255},
}

// PlotBlock draws a block as a PNG at path: each second's foreground p99,
// coloured by the window it fell in (grey for the foreground alone,
// hollow for seconds left out), and the rows the job cleaned per second.
func PlotBlock(path string, b *Block, g Goals) error {
	g.fill()
	labels := append([]string{PolicyAlone}, b.Policies()...)
	byLabel := map[string]plotter.XYs{}
	left := plotter.XYs{}
	rows := plotter.XYs{}
	for _, w := range b.Windows {
		for t := w.Start; t < w.End; t++ {
			s := b.Seconds[t]
			rows = append(rows, plotter.XY{X: float64(t) + 0.5, Y: float64(s.Rows)})
			if s.Lat.Count() == 0 {
				continue
			}
			h := NewHistogram()
			s.Lat.AddTo(h)
			pt := plotter.XY{X: float64(t) + 0.5, Y: ms(h.Quantile(0.99))}
			if t < w.Start+w.Dropped || g.stolen(s) {
				left = append(left, pt)
				continue
			}
			byLabel[w.Label()] = append(byLabel[w.Label()], pt)
		}
	}
	total := float64(b.Windows[len(b.Windows)-1].End)
	lat := plot.New()
	lat.Title.Text = fmt.Sprintf("%s: the foreground's p99 each second, by the window it fell in", b.Scenario)
	lat.Y.Label.Text = "ms"
	lat.X.Min, lat.X.Max, lat.Y.Min = 0, total, 0
	lat.Y.Scale = plot.LinearScale{}
	lat.Legend.Top, lat.Legend.Left = true, true
	lat.Add(plotter.NewGrid())
	for i, l := range labels {
		pts := byLabel[l]
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = policyColors[i%len(policyColors)]
		if l == PolicyAlone {
			sc.GlyphStyle.Color = color.Gray{Y: 110}
		}
		sc.GlyphStyle.Radius = vg.Points(2)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		lat.Add(sc)
		lat.Legend.Add(l, sc)
	}
	if len(left) > 0 {
		sc, err := plotter.NewScatter(left)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Radius, sc.GlyphStyle.Shape = color.Gray{Y: 170}, vg.Points(2), draw.RingGlyph{}
		lat.Add(sc)
		lat.Legend.Add("left out", sc)
	}
	rp := plot.New()
	rp.Title.Text = "rows the cleanup deleted each second"
	rp.Y.Label.Text = "rows"
	rp.X.Label.Text = "seconds into the block"
	rp.X.Min, rp.X.Max, rp.Y.Min = 0, total, 0
	rp.Add(plotter.NewGrid())
	if len(rows) > 0 {
		ln, err := plotter.NewLine(rows)
		if err != nil {
			return err
		}
		ln.Color = policyColors[0]
		rp.Add(ln)
	}
	const width = 12 * vg.Inch
	img := vgimg.New(width, 6*vg.Inch)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: 3 * vg.Millimeter, PadTop: 2 * vg.Millimeter,
		PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	grid := [][]*plot.Plot{{lat}, {rp}}
	canvases := plot.Align(grid, tiles, draw.New(img))
	lat.Draw(canvases[0][0])
	rp.Draw(canvases[1][0])
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("replay: write %s: %w", path, err)
	}
	return f.Close()
}

// AAPairsFor is the pairs an a/a of width w read off pairs pairs would
// need for an interval width goal wide, at the same spread between pairs
// (a bootstrap interval narrows as one over the root of the pairs): pairs
// itself where it is narrow enough already, 0 where w is not a width.
func AAPairsFor(w float64, pairs int, goal float64) int {
	if !(w > 0) || pairs < 1 || !(goal > 0) {
		return 0
	}
	if w <= goal {
		return pairs
	}
	return int(math.Ceil(float64(pairs) * (w / goal) * (w / goal)))
}

// Overview is the table that opens the replay section: every scenario's
// a/a (its width, and what a width within the goal would cost at that
// block's spread) beside default adaptive's standing against the frontier.
func Overview(results []BlockResult, g Goals) string {
	g.fill()
	var b strings.Builder
	margin := 2 * (g.P99Ratio - 1)
	fmt.Fprintf(&b, "\n### Every scenario\n\nThe instrument's own check (a/a, no job at all, judged as a policy is) and default adaptive's standing, one row per block below. **a/a for ±%.0f %%**, where the check failed on width, is the pairs an a/a interval %.2f wide would need at the spread this block's pairs read (the width narrows as one over the root of the pairs), and the minutes of a/a windows and their alone neighbours that takes; each closed-loop policy needs as many again. Where it failed narrow enough, its interval lies outside ±%.0f %% of 1.\n\n", 100*(g.P99Ratio-1), margin, 100*(g.P99Ratio-1))
	fmt.Fprintf(&b, "| scenario | a/a p99 ratio | a/a width | a/a check | a/a for ±%.0f %% | adaptive frontier | adaptive rows/s | adaptive extra s ≥ critical |\n|---|---|---:|---|---|---|---:|---:|\n", 100*(g.P99Ratio-1))
	for _, r := range results {
		blk := r.Block
		aa, width, check, need := "-", "-", "-", "-"
		if slices.Contains(blk.Policies(), PolicyAA) && r.AA.Pairs > 0 {
			aa = interval(r.AA)
			w := r.AA.High - r.AA.Low
			width = fmt.Sprintf("%.2f", w)
			check = "passed"
			if r.AAErr != nil {
				check = "failed"
			}
			lo, hi := 1-margin/2, 1+margin/2
			switch n := AAPairsFor(w, r.AA.Pairs, margin); {
			case r.AAErr == nil:
				need = fmt.Sprintf("met at %d pairs", r.AA.Pairs)
			case n > r.AA.Pairs:
				secs := 0
				if lay := blk.Layout; lay != nil {
					secs = n * (lay.Window + cmp.Or(lay.Alone, lay.Window))
				}
				need = fmt.Sprintf("%d pairs, %.0f min", n, float64(secs)/60)
			case n > 0 && (r.AA.Low < lo || r.AA.High > hi):
				need = fmt.Sprintf("narrow enough; outside [%.2f, %.2f]", lo, hi)
			}
		}
		frontier, rows, extra := "-", "-", "-"
		for _, p := range r.Policies {
			if p.Policy != PolicyAdaptive {
				continue
			}
			if p.Frontier.Pairs > 0 {
				frontier = fmt.Sprintf("**%s** %s", p.Frontier.Outcome, interval(p.Frontier.Verdict))
			}
			rows = fmt.Sprintf("%.0f", p.RowsPerSec)
			if p.OfCeiling > 0 && blk.Rate == 0 {
				rows += fmt.Sprintf(" (%.2f of ceiling)", p.OfCeiling)
			}
			extra = fmt.Sprintf("%.1f", p.ExtraCritical)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", blk.Scenario, aa, width, check, need, frontier, rows, extra)
	}
	return b.String()
}

// LongAADir is where blocks of a/a alone at more pairs are kept, under
// the results directory: what the instrument reads when the budget of a
// scenario's eight minutes does not bind.
func LongAADir(results string) string { return filepath.Join(results, "aa-long") }

// LongAASection renders the blocks of a/a alone at more pairs beside what
// the same scenario's block read at its own pairs (in results), and the
// width that block's spread predicts at the longer block's pairs.
func LongAASection(long []*Block, results []BlockResult, g Goals) string {
	g.fill()
	var b strings.Builder
	for _, lb := range long {
		r := Evaluate(lb, g)
		if r.AA.Pairs == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n### a/a at more pairs\n\nThe instrument alone, a/a windows only, for as many pairs as the table above says a width within the goal needs: does the interval narrow as one over the root of the pairs, and around 1.0?\n\n")
			b.WriteString("| scenario | command | a/a p99 ratio | width | check | the scenario's block: a/a, width, pairs | width predicted from it |\n|---|---|---|---:|---|---|---:|\n")
		}
		check := "passed"
		if r.AAErr != nil {
			check = "failed: " + strings.TrimPrefix(r.AAErr.Error(), "a/a check: ")
		}
		pairs := r.AA.Pairs
		if lb.Layout != nil {
			pairs = lb.Layout.Pairs
		}
		cmdline := fmt.Sprintf("throttled bench replay --scenario %s --policy a/a --pairs %d --results %s", lb.Scenario, pairs, filepath.ToSlash(LongAADir(DefaultResults)))
		same, predicted := "-", "-"
		if i := slices.IndexFunc(results, func(x BlockResult) bool { return x.Block.Scenario == lb.Scenario }); i >= 0 {
			if sr := results[i]; sr.AA.Pairs > 0 {
				w := sr.AA.High - sr.AA.Low
				same = fmt.Sprintf("%s, %.2f, %d", interval(sr.AA), w, sr.AA.Pairs)
				predicted = fmt.Sprintf("%.2f", w*math.Sqrt(float64(sr.AA.Pairs)/float64(r.AA.Pairs)))
			}
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %.2f | %s | %s | %s |\n", lb.Scenario, cmdline, interval(r.AA), r.AA.High-r.AA.Low, check, same, predicted)
	}
	return b.String()
}

// WhyShares is the share of label's seconds by the job's status (Second.Why),
// the largest first, as "critical:primary_load 80 %, growth 20 %"; empty
// for a block that did not record it.
func WhyShares(b *Block, label string) string {
	counts := map[string]int{}
	total := 0
	for _, w := range b.Windows {
		if w.Label() != label {
			continue
		}
		for t := max(w.Start, 0); t < min(w.End, len(b.Seconds)); t++ {
			if why := b.Seconds[t].Why; why != "" {
				counts[why]++
				total++
			}
		}
	}
	if total == 0 {
		return ""
	}
	whys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(whys, func(a, c string) int { return cmp.Or(counts[c]-counts[a], strings.Compare(a, c)) })
	var parts []string
	for _, w := range whys {
		parts = append(parts, fmt.Sprintf("%s %.0f %%", w, 100*float64(counts[w])/float64(total)))
	}
	return strings.Join(parts, ", ")
}
