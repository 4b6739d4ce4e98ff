package jobs

import (
	"math"
	"time"

	"github.com/throttled/throttled/status"
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
// The target itself answers to the foreground's latency signals
// (answer): while one holds or cuts the budget it halves toward
// [LatencyFloor], and the size follows at once; it doubles back once
// none binds.
//
// Durations include waiting for locks and I/O, which is what matters to
// the primary: a batch that holds locks for 5 s is too big whatever its
// row count.
type sizer struct {
	size, min, max int
	target         time.Duration // the configured target
	fgAt           time.Time     // the last foreground sample the size answered to

	// halvings is how many times the target is halved (at most to the
	// floor): the latency signals' doing.
	halvings int
	// zone is how the latency signals stood at the last reading, and
	// zoneAt when that reading's count began: the time they were first
	// read so, moved on by each halving or doubling counted since.
	zone   latencyZone
	zoneAt time.Time
	// lastSize and last are the last successful batch's size and
	// duration: the pace a shrunk target is applied at at once.
	lastSize int
	last     time.Duration
}

const sizeDeadband = 1.2

// observe records a successful batch of took, with the foreground's
// stretch read after it (0 when not measured) and the time of its sample,
// and returns the next size.
func (s *sizer) observe(took time.Duration, fg float64, fgAt time.Time) int {
	if took <= 0 {
		took = time.Microsecond
	}
	s.lastSize, s.last = s.size, took
	if fg > 1 && fgAt.After(s.fgAt) {
		s.fgAt = fgAt
		s.size = int(math.Floor(float64(s.size) * max(0.5, 1/fg)))
	}
	r := float64(s.effective()) / float64(took)
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
	s.halvings = min(s.halvings, s.floorHalvings())
	s.clamp()
}

func (s *sizer) clamp() { s.size = max(s.min, min(s.max, s.size)) }

// LatencyFloor is the least target batch duration a latency signal
// makes: while one binds the job, the target halves toward it (see
// Config.TargetBatchDuration; docs/CONTROLLER.md, "Batch size under a
// latency signal", says why 50 ms). A target configured under it is
// kept.
const LatencyFloor = 50 * time.Millisecond

// How fast the target moves. shrinkEvery is the controller's tick: the
// target halves at least as fast as the rate can fall (by half a tick at
// most: an ordinary cut takes half, an emergency cut three quarters on
// two readings), so it reaches the floor before the rate its least. growEvery is a Prometheus signal's default
// delay (a 15 s scrape and a 15 s rate window), the time a change of the
// work takes to show in its reading: each doubling is seen before the
// next.
const (
	shrinkEvery = time.Second
	growEvery   = 30 * time.Second
)

// latencyZone is how the foreground's latency signals stand for a job,
// as its target batch duration answers to them.
type latencyZone int

const (
	// latencyUnknown: no word of them (a pacer that cannot say), or the
	// job is paused: the target holds.
	latencyUnknown latencyZone = iota
	// latencyClear: none binds the job: the target grows back.
	latencyClear
	// latencyNear: one binds it under its target (the budget grows as it
	// allows), or the foreground's stretch is above 1/1.2, or the budget
	// does not grow for want of a reading (not_growing): the target
	// holds.
	latencyNear
	// latencyOver: one holds or cuts the budget, or slows the job under
	// status.SlowRate, or the foreground's stretch is above 1: the target
	// shrinks.
	latencyOver
)

// zoneOf is the latency zone a job's status says: whether its binding is
// a latency signal ([status.Binding.Latency]) and, by its code, how near
// its target that signal is.
func zoneOf(st status.JobStatus) latencyZone {
	code := status.CodeFor(st.State, st.Code)
	switch {
	case st.State == status.JobPaused || !code.Go():
		return latencyUnknown
	case code == status.CodeNotGrowing:
		// A signal unknown or without a new sample: the budget does not
		// grow, and the target does not either.
		return latencyNear
	case !st.Binding.Latency():
		return latencyClear
	}
	switch code {
	case status.CodeHolding, status.CodeCut, status.CodeTooSlow:
		return latencyOver
	case status.CodeBinding:
		return latencyNear
	}
	return latencyClear
}

// stretchZone is the latency zone the foreground's stretch says.
func stretchZone(fg float64) latencyZone {
	switch {
	case fg > 1:
		return latencyOver
	case fg > 1/sizeDeadband:
		return latencyNear
	}
	return latencyClear
}

// answer moves the target by the latency zone z read at now:
//
//   - over: halved when first read so, and again for every shrinkEvery
//     since, until it reaches LatencyFloor; the time counts up to the
//     first reading that is no longer over (a job that waits long for its
//     token reads seldom), so a signal read over and then near or clear
//     is taken to have been over until then;
//   - near, or unknown: held;
//   - clear: doubled for every growEvery between readings that all say
//     clear, back to the configured target.
//
// A target that shrank applies to the size at once: no bigger than the
// last batch's pace gives for it.
func (s *sizer) answer(z latencyZone, now time.Time) {
	before := s.effective()
	if s.zone == latencyOver {
		n := int(now.Sub(s.zoneAt) / shrinkEvery)
		s.halve(n)
		s.zoneAt = s.zoneAt.Add(time.Duration(max(n, 0)) * shrinkEvery)
	}
	switch {
	case z != s.zone:
		s.zone, s.zoneAt = z, now
		if z == latencyOver {
			s.halve(1)
		}
	case z == latencyClear:
		if n := int(now.Sub(s.zoneAt) / growEvery); n > 0 {
			s.halvings = max(0, s.halvings-n)
			s.zoneAt = s.zoneAt.Add(time.Duration(n) * growEvery)
		}
	}
	if eff := s.effective(); eff < before && s.last > 0 && s.lastSize > 0 {
		s.size = min(s.size, int(math.Floor(float64(s.lastSize)*float64(eff)/float64(s.last))))
		s.clamp()
	}
}

// halve halves the target n more times, not past the floor.
func (s *sizer) halve(n int) {
	if n > 0 {
		s.halvings = min(s.halvings+n, s.floorHalvings())
	}
}

// floorHalvings is how many halvings take the configured target to
// LatencyFloor: 0 for a target at or under it.
func (s *sizer) floorHalvings() int {
	n := 0
	for ; s.target>>n > LatencyFloor; n++ {
	}
	return n
}

// effective is the target the size adapts toward now: the configured
// one, halved by the latency signals, never under LatencyFloor (nor over
// the configured target).
func (s *sizer) effective() time.Duration {
	if s.halvings == 0 {
		return s.target
	}
	return max(min(LatencyFloor, s.target), s.target>>s.halvings)
}
