// Package plots draws the overview dashboard's key series as one PNG:
// the controller's mode, primary load against its target and critical
// lines, the budget and each job's rate, rows per second, connection
// headroom and replica lag, on one time axis, with holds shaded across
// every panel. Grafana is not part of the test machine, so the test run
// and `throttled demo` draw these from the same data the dashboard
// queries (Prometheus, or the process's own decisions).
package plots

import (
	"fmt"
	"image/color"
	"maps"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Point is one sample.
type Point struct {
	T time.Time
	V float64
}

// Region is a span of time, such as a hold.
type Region struct {
	Start, End time.Time
	Label      string
}

// Modes are the controller's modes, bottom to top on the mode panel.
var Modes = []string{"running", "throttled", "paused", "critical", "stale"}

// Overview is the data of one run.
type Overview struct {
	Title string
	// Mode is the controller's mode over time, as an index into Modes.
	Mode []Point
	// Load is primary_load; Target and Critical its rule's lines.
	Load             []Point
	Target, Critical float64
	Budget           []Point
	JobRates         map[string][]Point // batches per second, by job
	RowsPerSecond    map[string][]Point
	Headroom         []Point            // free client connection slots
	Lag              map[string][]Point // seconds, by replica
	Holds            []Region
}

type panel struct {
	title, unit string
	series      map[string][]Point
	lines       map[string]float64
	ticks       []plot.Tick
}

// WritePNG draws o to path.
func (o Overview) WritePNG(path string) error {
	panels := []panel{
		{title: "Mode", unit: "", series: map[string][]Point{"mode": o.Mode}, ticks: modeTicks()},
		{title: "Primary load (on-CPU sessions per core)", unit: "load", series: map[string][]Point{"primary_load": o.Load},
			lines: map[string]float64{"target": o.Target, "critical": o.Critical}},
		{title: "Background budget and job rates", unit: "batches/s", series: merge(map[string][]Point{"budget": o.Budget}, o.JobRates)},
		{title: "Rows per second, by job", unit: "rows/s", series: o.RowsPerSecond},
		{title: "Connection headroom (free client slots)", unit: "slots", series: map[string][]Point{"free slots": o.Headroom}},
		{title: "Replica lag", unit: "s", series: o.Lag},
	}
	from, to, ok := span(o)
	if !ok {
		return fmt.Errorf("plots: %s: no samples to draw", path)
	}
	rows := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p, err := pn.plot(from, to, o.Holds)
		if err != nil {
			return fmt.Errorf("plots: panel %q: %w", pn.title, err)
		}
		if i == 0 {
			p.Title.Text = o.Title + " (holds shaded orange)\n\n" + pn.title
		}
		rows[i] = []*plot.Plot{p}
	}
	const width, perPanel = 11 * vg.Inch, 2.4 * vg.Inch
	img := vgimg.New(width, perPanel*vg.Length(len(panels))+0.4*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plots: write %s: %w", path, err)
	}
	return f.Close()
}

func (pn panel) plot(from, to time.Time, holds []Region) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.Y.Label.Text = pn.unit
	p.X.Min, p.X.Max = 0, to.Sub(from).Seconds()
	p.X.Label.Text = fmt.Sprintf("seconds since %s UTC", from.UTC().Format("15:04:05"))
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	if pn.ticks != nil {
		p.Y.Tick.Marker = plot.ConstantTicks(pn.ticks)
		p.Y.Min, p.Y.Max = -0.5, float64(len(Modes))-0.5
	}
	p.Y.Min = min(p.Y.Min, 0)
	for _, h := range holds {
		p.Add(shade{x0: h.Start.Sub(from).Seconds(), x1: h.End.Sub(from).Seconds()})
	}
	names := slices.Sorted(maps.Keys(pn.series))
	for i, name := range names {
		pts := pn.series[name]
		if len(pts) == 0 {
			continue
		}
		xy := make(plotter.XYs, len(pts))
		for j, pt := range pts {
			xy[j] = plotter.XY{X: pt.T.Sub(from).Seconds(), Y: pt.V}
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		if pn.ticks != nil {
			l.StepStyle = plotter.PreStep
		}
		l.Color, l.Width = palette[i%len(palette)], vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(name, l)
	}
	for _, name := range slices.Sorted(maps.Keys(pn.lines)) {
		v := pn.lines[name]
		if v == 0 {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: v}, {X: p.X.Max, Y: v}})
		if err != nil {
			return nil, err
		}
		l.Color = map[string]color.Color{"target": color.RGBA{R: 255, G: 152, A: 255}, "critical": color.RGBA{R: 220, A: 255}}[name]
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s %g", name, v), l)
		p.Y.Max = max(p.Y.Max, v*1.1)
	}
	return p, nil
}

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 23, G: 190, B: 207, A: 255}, color.RGBA{R: 140, G: 86, B: 75, A: 255}, color.RGBA{R: 227, G: 119, B: 194, A: 255},
}

func modeTicks() []plot.Tick {
	var t []plot.Tick
	for i, m := range Modes {
		t = append(t, plot.Tick{Value: float64(i), Label: m})
	}
	return t
}

func merge(a, b map[string][]Point) map[string][]Point {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// span is the time the samples cover.
func span(o Overview) (from, to time.Time, ok bool) {
	all := [][]Point{o.Mode, o.Load, o.Budget, o.Headroom}
	for _, m := range []map[string][]Point{o.JobRates, o.RowsPerSecond, o.Lag} {
		all = slices.AppendSeq(all, maps.Values(m))
	}
	for _, s := range all {
		for _, p := range s {
			if !ok || p.T.Before(from) {
				from = p.T
			}
			if !ok || p.T.After(to) {
				to = p.T
			}
			ok = true
		}
	}
	return from, to, ok && to.After(from)
}

// shade fills a hold's span across the whole panel height.
type shade struct{ x0, x1 float64 }

func (s shade) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x0, x1 := trX(max(s.x0, p.X.Min)), trX(min(s.x1, p.X.Max))
	if s.x1 < p.X.Min || s.x0 > p.X.Max {
		return
	}
	// A hold seen in one sample still shows, as a thin band.
	x1 = max(x1, x0+vg.Points(2))
	c.FillPolygon(color.NRGBA{R: 255, G: 165, A: 60}, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
}

// Regions turns 0/1 samples into spans: a region runs from the first of a
// run of consecutive non-zero samples (no more than gap apart) to the
// last; a 0 sample ends a run.
func Regions(pts []Point, gap time.Duration, label string) []Region {
	pts = slices.SortedFunc(slices.Values(pts), func(a, b Point) int { return a.T.Compare(b.T) })
	var out []Region
	open := false // the last sample was non-zero: a run goes on
	for _, p := range pts {
		if p.V == 0 {
			open = false
			continue
		}
		if n := len(out); open && p.T.Sub(out[n-1].End) <= gap {
			out[n-1].End = p.T
			continue
		}
		out = append(out, Region{Start: p.T, End: p.T, Label: label})
		open = true
	}
	return out
}
