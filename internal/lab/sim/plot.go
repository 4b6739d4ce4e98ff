package sim

import (
	"fmt"
	"image/color"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/throttled/throttled/signals"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// policyColors gives each policy one colour in every plot.
var policyColors = map[string]color.RGBA{
	"adaptive": {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"fixed":    {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"lag-only": {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"binary":   {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"aimd":     {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// panel is the series a plot shows for a scenario's own rule.
type panel struct {
	label string
	read  func(Point) float64
	// ruled: the series is the rule's signal, drawn against its target
	// and critical lines.
	ruled bool
}

// rulePanels give the panel for each signal a scenario's rule may be on.
// The horizon's age is the same whatever the policy does, so its panel
// shows what the policy made of it: rows vacuum cannot remove.
var rulePanels = map[signals.Name]panel{
	signals.ArchivePendingSegments: {label: string(signals.ArchivePendingSegments), read: func(p Point) float64 { return p.Pending }, ruled: true},
	signals.XminHorizonAgeSeconds:  {label: "unreclaimable dead rows, millions", read: func(p Point) float64 { return p.DeadRows / 1e6 }},
}

// Plot writes dir/<scenario>.png: the true primary_load of each policy
// against the target and critical lines above, and each policy's rate
// against the oracle's below. A scenario with a rule of its own gets a
// panel between them: each policy's reading of the rule's signal against
// its target and critical lines, or what the policy made of it
// (rulePanels). It returns the file's path.
func Plot(dir string, sc Scenario, results []Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("sim: plot: %w", err)
	}
	top := plot.New()
	top.Title.Text = sc.Name + ": " + sc.Description
	top.Y.Label.Text = "primary_load"
	bottom := plot.New()
	bottom.X.Label.Text = "seconds"
	bottom.Y.Label.Text = "background batches/s"
	rows := [][]*plot.Plot{{top}}
	var middle *plot.Plot
	var ruled signals.Name
	var pan panel
	for _, n := range slices.Sorted(maps.Keys(sc.Rules)) {
		if p, ok := rulePanels[n]; ok {
			ruled, pan = n, p
			break
		}
	}
	if ruled != "" {
		middle = plot.New()
		middle.Y.Label.Text = pan.label
		rows = append(rows, []*plot.Plot{middle})
	}
	rows = append(rows, []*plot.Plot{bottom})
	for _, row := range rows {
		row[0].Add(plotter.NewGrid())
		row[0].Legend.Top = true
	}
	hline := func(p *plot.Plot, y float64, name string, c color.Color) error {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: float64(sc.Duration), Y: y}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = c, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	if err := hline(top, target, "target", color.Black); err != nil {
		return "", err
	}
	if err := hline(top, critical, "critical", color.RGBA{R: 0xd6, A: 0xff}); err != nil {
		return "", err
	}
	if middle != nil && pan.ruled {
		rule := sc.Rules[ruled]
		if err := hline(middle, rule.Target, "target", color.Black); err != nil {
			return "", err
		}
		if rule.Critical > 0 {
			if err := hline(middle, rule.Critical, "critical", color.RGBA{R: 0xd6, A: 0xff}); err != nil {
				return "", err
			}
		}
	}
	for i, r := range results {
		loads, rates := make(plotter.XYs, len(r.Series)), make(plotter.XYs, len(r.Series))
		for k, pt := range r.Series {
			loads[k] = plotter.XY{X: pt.T, Y: min(pt.Load, 3)}
			rates[k] = plotter.XY{X: pt.T, Y: pt.Rate}
		}
		pairs := []struct {
			p  *plot.Plot
			xy plotter.XYs
		}{{top, loads}, {bottom, rates}}
		if middle != nil {
			xy := make(plotter.XYs, len(r.Series))
			for k, pt := range r.Series {
				xy[k] = plotter.XY{X: pt.T, Y: pan.read(pt)}
			}
			pairs = append(pairs, struct {
				p  *plot.Plot
				xy plotter.XYs
			}{middle, xy})
		}
		for _, pair := range pairs {
			l, err := plotter.NewLine(pair.xy)
			if err != nil {
				return "", err
			}
			l.Color = policyColors[r.Policy]
			l.Width = vg.Points(1)
			if r.Policy == "adaptive" {
				l.Width = vg.Points(2)
			}
			pair.p.Add(l)
			pair.p.Legend.Add(r.Policy, l)
		}
		if i == 0 {
			oracle := make(plotter.XYs, len(r.Series))
			for k, pt := range r.Series {
				oracle[k] = plotter.XY{X: pt.T, Y: pt.Oracle}
			}
			l, err := plotter.NewLine(oracle)
			if err != nil {
				return "", err
			}
			l.Color, l.Dashes = color.Black, []vg.Length{vg.Points(2), vg.Points(2)}
			bottom.Add(l)
			bottom.Legend.Add("oracle", l)
		}
	}
	bottom.Y.Max = min(bottom.Y.Max, maxBudget*0.6)
	if middle != nil && pan.ruled {
		// Past three times the critical level (or the target) the lines
		// that matter would be flat at the bottom.
		rule := sc.Rules[ruled]
		middle.Y.Min, middle.Y.Max = 0, min(middle.Y.Max, 3*max(rule.Critical, rule.Target))
	}
	img := vgimg.New(12*vg.Inch, vg.Length(4*len(rows))*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadY: vg.Points(6), PadX: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4)}
	canvases := plot.Align(rows, tiles, dc)
	for i, row := range rows {
		row[0].Draw(canvases[i][0])
	}
	path := filepath.Join(dir, sc.Name+".png")
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("sim: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return "", fmt.Errorf("sim: plot %s: %w", path, err)
	}
	return path, f.Close()
}
