package throttle

import (
	"testing"
	"time"

	"github.com/throttled/throttled/status"
)

// BenchmarkStep measures one controller tick with ten jobs reporting.
func BenchmarkStep(b *testing.B) {
	c, err := New(Config{MaxBudget: 1000, Holds: fakeHolds{}})
	if err != nil {
		b.Fatal(err)
	}
	jobs := []status.Job{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	for _, j := range jobs {
		if err := c.Register(JobConfig{Name: j}); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		now := c0.Add(time.Duration(i) * time.Second)
		for _, j := range jobs {
			c.Report(j, Feedback{Rows: 100, Duration: 10 * time.Millisecond})
		}
		c.Step(now, snap(now, world{load: 0.5, used: 0.3, lag: 0.1}))
	}
}
