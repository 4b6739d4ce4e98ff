package limit

import (
	"context"
	"testing"

	"golang.org/x/time/rate"
)

// The benchmarks below pair Limiter.Wait plus its release with their
// anchor, rate.Limiter.Wait, on the same bucket: a rate and depth that
// always have a token, so both measure their bookkeeping, not a wait.
const (
	benchRate  = 1e9
	benchBurst = 1 << 20
)

func benchLimiter(b *testing.B) *Limiter {
	b.Helper()
	l := New("bench", nil)
	l.Apply(Allocation{Rate: benchRate, Burst: benchBurst, MaxInFlight: 1 << 20})
	if open, reason := l.State(); !open {
		b.Fatalf("gate closed: %s", reason)
	}
	return l
}

func benchWait(b *testing.B, l *Limiter) {
	release, err := l.Wait(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	release.Release()
}

func benchRateWait(b *testing.B, l *rate.Limiter) {
	if err := l.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLimiterWait is one batch's permission and release, gate open
// and a token available, from one goroutine.
func BenchmarkLimiterWait(b *testing.B) {
	l := benchLimiter(b)
	b.ReportAllocs()
	for b.Loop() {
		benchWait(b, l)
	}
}

// BenchmarkLimiterWaitAnchor is BenchmarkLimiterWait's anchor:
// rate.Limiter.Wait on the same bucket.
func BenchmarkLimiterWaitAnchor(b *testing.B) {
	l := rate.NewLimiter(benchRate, benchBurst)
	b.ReportAllocs()
	for b.Loop() {
		benchRateWait(b, l)
	}
}

// BenchmarkLimiterWaitParallel is BenchmarkLimiterWait from GOMAXPROCS
// goroutines sharing one Limiter.
func BenchmarkLimiterWaitParallel(b *testing.B) {
	l := benchLimiter(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchWait(b, l)
		}
	})
}

// BenchmarkLimiterWaitParallelAnchor is BenchmarkLimiterWaitParallel's
// anchor.
func BenchmarkLimiterWaitParallelAnchor(b *testing.B) {
	l := rate.NewLimiter(benchRate, benchBurst)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchRateWait(b, l)
		}
	})
}
