package replay

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// block.go: the interleaved instrument's data. A scenario runs as one
// block: the foreground and the scenario's disturbance run throughout,
// and short windows where one policy's job works alternate with windows
// of the foreground alone, in a randomized order. The block keeps every
// second (its latency histogram, the hypervisor's steal, the rows the job
// cleaned, the independent sampler's load), so a new statistic needs no
// new run; verdict.go turns them into pairs and verdicts.

// PolicyAlone is a window of the foreground alone: no job runs. Every
// policy window sits between two of them.
const PolicyAlone = "alone"

// PolicyAA is the instrument's own check: a window labelled as a policy
// in which no job runs either, compared with its neighbours exactly as a
// policy is. Its verdict must be met, with a narrow interval around 1.0.
const PolicyAA = "a/a"

// Window is one stretch of a block: one policy's job at work, or the
// foreground alone. Seconds are from the block's start, [Start, End).
type Window struct {
	Policy string `json:"policy"`
	// Rate is a fixed policy's rate, batches per second; 0 otherwise.
	Rate       float64 `json:"rate,omitempty"`
	Start, End int     `json:"-"`
	// Dropped is how many of the window's first seconds the statistics
	// leave out: what the last window's job left behind (a commit in
	// flight, WAL to flush, the replica's backlog) still shows there.
	Dropped int `json:"dropped"`
	// kind is the window's index in the policies Schedule was given.
	kind int
}

// windowJSON is Window's stored form: start and end named.
type windowJSON struct {
	Policy  string  `json:"policy"`
	Rate    float64 `json:"rate,omitempty"`
	Start   int     `json:"start"`
	End     int     `json:"end"`
	Dropped int     `json:"dropped"`
}

// MarshalJSON stores the window with its start and end.
func (w Window) MarshalJSON() ([]byte, error) {
	return json.Marshal(windowJSON{w.Policy, w.Rate, w.Start, w.End, w.Dropped})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (w *Window) UnmarshalJSON(b []byte) error {
	var j windowJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*w = Window{Policy: j.Policy, Rate: j.Rate, Start: j.Start, End: j.End, Dropped: j.Dropped}
	return nil
}

// Second is one second of a block.
type Second struct {
	// T is the second, from the block's start.
	T int `json:"t"`
	// Lat is the latency of the foreground's transactions scheduled in
	// this second, from their scheduled start.
	Lat SparseHist `json:"lat"`
	// Client and Server split Lat's latencies in two, transaction by
	// transaction: Client the measuring process's own wait (its lateness
	// behind the schedule and a free worker's wake-up, clientWait), Server
	// the rest (waiting for a worker busy on the database, the pool's
	// connection, the round trips to the commit's answer). Server is what
	// a user of a real primary sees, whose application runs on other
	// cores; the verdicts judge it. Empty in blocks recorded before the
	// split.
	Client SparseHist `json:"client,omitzero"`
	Server SparseHist `json:"server,omitzero"`
	// Failed is the foreground's transactions scheduled in this second
	// that failed or could not start.
	Failed int64 `json:"failed,omitempty"`
	// Steal is the share of the CPU time the machine's processes wanted
	// in this second that the hypervisor gave to other guests;
	// stealUnknown where /proc/stat could not be read.
	Steal float64 `json:"steal"`
	// Rows is the rows the job cleaned in this second.
	Rows int64 `json:"rows,omitempty"`
	// Load is the independent sampler's smoothed primary_load, the
	// highest it read in this second; -1 where no reading was usable.
	Load float64 `json:"load"`
	// Critical is the share of this second's samples at or over the
	// load's critical level.
	Critical float64 `json:"critical,omitempty"`
	// Lag is the largest replica lag read in this second, seconds.
	Lag float64 `json:"lag,omitempty"`
	// In an adaptive policy's window, what its own sampler read in this
	// second, the highest of each: Canary the smoothed foreground_latency
	// ratio the controller judges, CanaryRaw the ratio of the last probes
	// before smoothing, CanaryMs the canary's mean commit latency in
	// milliseconds; and Budget the job's rate (batches per second) and
	// Batch its batch size. 0 in every other window.
	Canary    float64 `json:"canary,omitempty"`
	CanaryRaw float64 `json:"canary_raw,omitempty"`
	CanaryMs  float64 `json:"canary_ms,omitempty"`
	Budget    float64 `json:"budget,omitempty"`
	// App is, in an adaptive-app window, its Prometheus signal's ratio
	// over the job-free baseline (the application's p99), the highest it
	// read in this second; 0 elsewhere or while it had none.
	App   float64 `json:"app,omitempty"`
	Batch int     `json:"batch,omitempty"`
	// Why is, in a closed-loop policy's window, its job's last status
	// code read in this second (status.Code), with the binding signal
	// after a colon where it names one ("cut:primary_load",
	// "critical:primary_load"): what held
	// the job back. Empty elsewhere.
	Why string `json:"why,omitempty"`
	// Probe is the latency of the instrument's own canary commits due in
	// this second (BlockConfig.Probe), under every window alike; nil
	// without it.
	Probe *SparseHist `json:"probe,omitempty"`
}

// SparseHist is a Histogram stored as its non-empty buckets.
type SparseHist struct {
	// Buckets are [index, count] pairs of Histogram buckets, ascending.
	Buckets [][2]uint64 `json:"b,omitempty"`
	// MaxUs is the largest value, microseconds.
	MaxUs int64 `json:"max,omitempty"`
}

// Sparse stores h.
func Sparse(h *Histogram) SparseHist {
	var s SparseHist
	if h == nil {
		return s
	}
	for i, c := range h.counts {
		if c > 0 {
			s.Buckets = append(s.Buckets, [2]uint64{uint64(i), c})
		}
	}
	s.MaxUs = h.max.Microseconds()
	return s
}

// AddTo adds s's values to h.
func (s SparseHist) AddTo(h *Histogram) {
	for _, b := range s.Buckets {
		i := min(int(b[0]), len(h.counts)-1)
		h.counts[i] += b[1]
		h.n += b[1]
	}
	h.max = max(h.max, time.Duration(s.MaxUs)*time.Microsecond)
}

// Count is the values s holds.
func (s SparseHist) Count() uint64 {
	var n uint64
	for _, b := range s.Buckets {
		n += b[1]
	}
	return n
}

// Block is one scenario's interleaved run: its windows in the order they
// ran and every second.
type Block struct {
	Scenario string `json:"scenario"`
	// Rate is the foreground's arrival rate, transactions per second
	// (before the scenario's own surge, if any).
	Rate float64 `json:"rate"`
	// WindowSeconds is each window's length; Seed the order's.
	WindowSeconds int `json:"window_seconds"`
	// Layout is the block's shape; nil in blocks recorded before it had
	// one (every window WindowSeconds long).
	Layout *Layout `json:"layout,omitempty"`
	Seed   uint64  `json:"seed"`
	// ClientNice is the nice value the measuring process ran at
	// (BlockConfig.ClientNice); 0 for its default.
	ClientNice int      `json:"client_nice,omitempty"`
	Windows    []Window `json:"windows"`
	Seconds    []Second `json:"seconds"`
	// Started is when the block began; Took how long it ran, setup
	// included.
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took"`
	// Finished names the policies whose job ran out of old rows in the
	// block: their rows per second understate them.
	Finished []string `json:"finished,omitempty"`
	// EventErrors are what the scenario's disturbance met, if anything.
	EventErrors string `json:"event_errors,omitempty"`
}

// Policies lists the block's policies (not alone) in the order each
// first ran.
func (b *Block) Policies() []string {
	var out []string
	for _, w := range b.Windows {
		if w.Policy != PolicyAlone && !slices.Contains(out, w.label()) {
			out = append(out, w.label())
		}
	}
	return out
}

// label names a window's policy as the tables do: fixed-N for a fixed
// rate.
func (w Window) label() string {
	if w.Policy == PolicyFixed {
		return fmt.Sprintf("fixed-%g", w.Rate)
	}
	return w.Policy
}

// Label is the window's policy as the tables name it.
func (w Window) Label() string { return w.label() }

// check reports the first inconsistency of a block read from a file.
func (b *Block) check() error {
	if b.Scenario == "" {
		return fmt.Errorf("no scenario")
	}
	if b.WindowSeconds <= 0 {
		return fmt.Errorf("window_seconds %d", b.WindowSeconds)
	}
	for i, w := range b.Windows {
		if w.Start < 0 || w.End <= w.Start || w.End > len(b.Seconds) || w.Dropped < 0 || w.Dropped >= w.End-w.Start {
			return fmt.Errorf("window %d (%s) spans seconds %d-%d (dropping %d) of %d", i, w.Policy, w.Start, w.End, w.Dropped, len(b.Seconds))
		}
		if i > 0 && w.Start < b.Windows[i-1].End {
			return fmt.Errorf("window %d (%s) starts at %d, inside the one before it", i, w.Policy, w.Start)
		}
	}
	for i, s := range b.Seconds {
		if s.T != i {
			return fmt.Errorf("second %d is numbered %d", i, s.T)
		}
	}
	return nil
}
