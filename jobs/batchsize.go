package jobs

import (
	"math"
	"time"
)

// sizer adapts the batch size toward a target batch duration:
//
//   - A batch slower than 1.2x the target shrinks the next one at once, in
//     proportion (a batch twice too slow halves the size).
//   - A batch faster than the target divided by 1.2 grows the next one
//     gently: by the ratio, but at most 20 % per batch.
//   - Between the two the size holds, so noise does not make it wander.
//   - When the pacer is a [Stretcher] and the foreground is stretched
//     (above 1), the size shrinks in proportion, at most by half, once for
//     each new foreground sample; while the stretch is above 1/1.2 the
//     size does not grow, however fast the batches are.
//   - A statement timeout halves it: the batch did not even finish.
//   - The size always stays within [min, max].
//
// Durations include waiting for locks and I/O, which is what matters to
// the primary: a batch that holds locks for 5 s is too big whatever its
// row count.
type sizer struct {
	size, min, max int
	target         time.Duration
	fgAt           time.Time // the last foreground sample the size answered to
}

const sizeDeadband = 1.2

// observe records a successful batch of took, with the foreground's
// stretch read after it (0 when not measured) and the time of its sample,
// and returns the next size.
func (s *sizer) observe(took time.Duration, fg float64, fgAt time.Time) int {
	if took <= 0 {
		took = time.Microsecond
	}
	if fg > 1 && fgAt.After(s.fgAt) {
		s.fgAt = fgAt
		s.size = int(math.Floor(float64(s.size) * max(0.5, 1/fg)))
	}
	r := float64(s.target) / float64(took)
	switch {
	case r < 1/sizeDeadband:
		s.size = int(math.Floor(float64(s.size) * r))
	case r > sizeDeadband && fg <= 1/sizeDeadband:
		s.size = int(math.Ceil(float64(s.size) * min(r, 1.2)))
	}
	s.clamp()
	return s.size
}

// timedOut halves the size after a statement timeout.
func (s *sizer) timedOut() int {
	s.size /= 2
	s.clamp()
	return s.size
}

// bound sets the bounds: cfg's, with each of minSize, maxSize and target
// that is set (not 0) in its place. When the sizes cross, the one set
// here wins.
func (s *sizer) bound(cfg Config, minSize, maxSize int, target time.Duration) {
	s.min, s.max, s.target = cfg.MinBatchSize, cfg.MaxBatchSize, cfg.TargetBatchDuration
	if minSize > 0 {
		s.min = minSize
	}
	if maxSize > 0 {
		s.max = maxSize
	}
	if target > 0 {
		s.target = target
	}
	if s.min > s.max {
		if maxSize > 0 {
			s.min = s.max
		} else {
			s.max = s.min
		}
	}
	s.clamp()
}

func (s *sizer) clamp() { s.size = max(s.min, min(s.max, s.size)) }
