package replay

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type line struct {
	name string
	pts  []point
}

type panel struct {
	title, unit string
	lines       []line
	levels      map[string]float64
}

var (
	palette    = []color.Color{color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255}, color.RGBA{R: 44, G: 160, B: 44, A: 255}}
	levelColor = map[string]color.Color{"target": color.RGBA{R: 255, G: 152, A: 255}, "critical": color.RGBA{R: 220, A: 255}}
	eventShade = color.NRGBA{R: 255, G: 165, A: 60}
)

// plotRun draws one run as a PNG at path: foreground throughput and
// latency, primary_load from the independent sampler, the job's rows per
// second and the replica's lag, with the scenario's events shaded.
func plotRun(path string, r Result, sc Scenario, rate float64) error {
	s := r.series
	var tps, p50, p99 []point
	for i, n := range s.done {
		tps = append(tps, point{float64(i) + 0.5, float64(n)})
	}
	for i, h := range s.latency {
		if h.Count() > 0 {
			p50 = append(p50, point{float64(i) + 0.5, ms(h.Quantile(0.5))})
			p99 = append(p99, point{float64(i) + 0.5, ms(h.Quantile(0.99))})
		}
	}
	panels := []panel{
		{title: fmt.Sprintf("Foreground throughput (offered %.0f tx/s before surges)", rate), unit: "tx/s", lines: []line{{"completed", tps}}},
		{title: "Foreground latency per second, from the scheduled start", unit: "ms", lines: []line{{"p50", p50}, {"p99", p99}}},
		{title: "primary_load (independent sampler)", unit: "per core", lines: []line{{"smoothed", s.load}, {"raw", s.raw}},
			levels: map[string]float64{"target": loadRule.Target, "critical": loadRule.Critical}},
		{title: "Cleanup job", unit: "rows/s", lines: []line{{"rows/s", s.rows}}},
		{title: "Replica lag", unit: "s", lines: []line{{"replica1", s.lag}}},
	}
	length := r.runLength()
	const width, perPanel = 10 * vg.Inch, 2 * vg.Inch
	img := vgimg.New(width, perPanel*vg.Length(len(panels))+0.4*vg.Inch)
	rows := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p, err := pn.plot(length, sc)
		if err != nil {
			return fmt.Errorf("replay: plot %s: %w", path, err)
		}
		if i == 0 {
			p.Title.Text = fmt.Sprintf("%s / %s (events shaded)\n\n%s", r.Scenario, r.Policy, pn.title)
		}
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: 3 * vg.Millimeter, PadTop: 2 * vg.Millimeter,
		PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(rows, tiles, draw.New(img))
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
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

// runLength is how long the run's series span, at least a second.
func (r Result) runLength() float64 {
	end := 1.0
	for _, ps := range [][]point{r.series.load, r.series.rows, r.series.lag} {
		if len(ps) > 0 {
			end = max(end, ps[len(ps)-1].t)
		}
	}
	return max(end, float64(len(r.series.latency)))
}

func (pn panel) plot(length float64, sc Scenario) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.Y.Label.Text = pn.unit
	p.X.Label.Text = "seconds into the run"
	p.X.Min, p.X.Max, p.Y.Min = 0, length, 0
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	for _, ev := range sc.Events {
		p.Add(shade{x0: ev.From * length, x1: ev.To * length})
	}
	for i, l := range pn.lines {
		if len(l.pts) == 0 {
			continue
		}
		xy := make(plotter.XYs, len(l.pts))
		for j, pt := range l.pts {
			xy[j] = plotter.XY{X: pt.t, Y: pt.v}
		}
		ln, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		ln.Color, ln.Width = palette[i%len(palette)], vg.Points(1.2)
		p.Add(ln)
		p.Legend.Add(l.name, ln)
	}
	for name, v := range pn.levels {
		ln, err := plotter.NewLine(plotter.XYs{{X: 0, Y: v}, {X: length, Y: v}})
		if err != nil {
			return nil, err
		}
		ln.Color, ln.Dashes = levelColor[name], []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(ln)
		p.Legend.Add(fmt.Sprintf("%s %g", name, v), ln)
		p.Y.Max = max(p.Y.Max, v*1.1)
	}
	return p, nil
}

// shade fills a span of the x axis across the panel's height.
type shade struct{ x0, x1 float64 }

func (s shade) Plot(c draw.Canvas, p *plot.Plot) {
	tx, _ := p.Transforms(&c)
	x0, x1 := tx(s.x0), tx(s.x1)
	pts := []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}}
	c.FillPolygon(eventShade, c.ClipPolygonXY(pts))
}
