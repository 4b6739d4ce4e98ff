package replay

import (
	"context"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// adaptive-app reads the foreground's own p99 from a real Prometheus
// scraping the generator's histogram, through the product's Prometheus
// signal: in its windows the ratio over the job-free baseline is read (the
// baseline learnt in the warm-up), and nowhere else.
func TestAdaptiveAppReadsTheApplicationsP99(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	be, err := OpenBlockEnv(ctx, c, 2, 2, 8, 2_000_000, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	b, err := RunBlock(ctx, be, BlockConfig{Cluster: c, Scenario: "quiet", Rate: 2000, Pairs: 2, WindowSeconds: 8, Rows: 2_000_000, MaxBatch: 300,
		Policies: []string{PolicyAdaptiveApp}, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	in, out, secs := 0, 0, 0
	for _, w := range b.Windows {
		for _, s := range b.Seconds[w.Start:w.End] {
			switch {
			case w.Policy == PolicyAdaptiveApp:
				secs++
				if s.App > 0 {
					in++
				}
			case s.App != 0:
				out++
			}
		}
	}
	if in < secs/2 || out > 0 {
		t.Errorf("the application's p99 ratio read in %d of adaptive-app's %d seconds and in %d seconds of other windows; want most of its own and none elsewhere", in, secs, out)
	}
	var rows int64
	for _, s := range b.Seconds {
		rows += s.Rows
	}
	if rows == 0 {
		t.Error("adaptive-app cleaned no row: its signal never let the job run")
	}
}
