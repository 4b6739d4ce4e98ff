package replay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// blockfiles.go: each scenario's block is its own results file, so one
// scenario can run again alone and be merged with the others; the
// machine's calibration is one checked-in file that every run reads.

// DefaultResults is where `throttled bench replay` keeps each scenario's
// results file, and docs/BENCHMARKS.md's tables are rendered from.
const DefaultResults = "docs/replay"

// BlockFile is a block's results file in dir.
func BlockFile(dir, scenario string) string { return filepath.Join(dir, scenario+".json") }

// WriteBlock writes b to its results file in dir (one line per second,
// so a diff shows what changed).
func WriteBlock(dir string, b *Block) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	head := *b
	head.Seconds = nil
	hj, err := json.Marshal(head)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Write(hj[:len(hj)-1])
	buf.WriteString(`,"seconds":[` + "\n")
	for i, s := range b.Seconds {
		sj, err := json.Marshal(s)
		if err != nil {
			return err
		}
		buf.Write(sj)
		if i < len(b.Seconds)-1 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
	}
	buf.WriteString("]}\n")
	tmp := BlockFile(dir, b.Scenario) + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, BlockFile(dir, b.Scenario))
}

// ReadBlock reads a block's results file.
func ReadBlock(path string) (*Block, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b Block
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("%s: not a block's results: %w", path, err)
	}
	if err := b.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, ok := scenarioByName(b.Scenario); !ok {
		return nil, fmt.Errorf("%s: unknown scenario %q", path, b.Scenario)
	}
	for i := range b.Windows {
		b.Windows[i].kind = -1
	}
	evenAloneDrops(&b)
	return &b, nil
}

// evenAloneDrops has every alone window of b leave out as many first
// seconds as the most any of them does: the blocks run on 2026-12-07
// between 01:20 and 02:10 kept every second of an alone window after
// a/a's, so their a/a was judged on longer alone sides than a policy, and
// a/a must be judged exactly as a policy is.
func evenAloneDrops(b *Block) {
	drop := dropOf(b)
	for i, w := range b.Windows {
		if w.Policy == PolicyAlone && w.Dropped < drop && drop < w.End-w.Start {
			b.Windows[i].Dropped = drop
		}
	}
}

// ReadBlocks reads every block's results file in dir, in the scenarios'
// report order.
func ReadBlocks(dir string) ([]*Block, error) {
	var out []*Block
	for _, name := range ScenarioNames() {
		b, err := ReadBlock(BlockFile(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// MachineCalibration is the foreground rate measured on one machine, with
// what the machine is: every run reads it, and `--calibrate` measures it
// again. Runs on another machine say theirs differs.
type MachineCalibration struct {
	// Rate is the foreground's arrival rate the blocks use, transactions
	// per second: KneeShare of the knee, the lowest of the repeats.
	Rate float64 `json:"rate"`
	// Repeats are each repeat's rate; they agree within MaxCalibrationSpread.
	Repeats []float64 `json:"repeats"`
	// Cores, MemoryGiB and PostgreSQL describe the machine and server.
	Cores      int     `json:"cores"`
	MemoryGiB  float64 `json:"memory_gib"`
	PostgreSQL string  `json:"postgresql"`
	// At is when it was measured, Took how long.
	At   time.Time     `json:"at"`
	Took time.Duration `json:"took"`
}

// MaxCalibrationSpread is how far two calibration repeats may disagree
// (the highest over the lowest, less one) before calibration says so and
// stops: a machine whose capacity moves by more cannot be compared with
// itself.
const MaxCalibrationSpread = 0.20

// ReadCalibration reads a calibration file.
func ReadCalibration(path string) (*MachineCalibration, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c MachineCalibration
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !(c.Rate > 0) {
		return nil, fmt.Errorf("%s: rate %v is not a rate", path, c.Rate)
	}
	return &c, nil
}

// WriteCalibration writes c to path.
func WriteCalibration(path string, c *MachineCalibration) error {
	js, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(js, '\n'), 0o644)
}

// AgreeingRepeats returns the rate of repeats (the lowest) and an error
// naming them when they disagree by more than MaxCalibrationSpread.
func AgreeingRepeats(repeats []float64) (float64, error) {
	if len(repeats) == 0 {
		return 0, errors.New("replay: calibration: no repeats")
	}
	lo, hi := slices.Min(repeats), slices.Max(repeats)
	if !(lo > 0) || hi/lo-1 > MaxCalibrationSpread {
		var s []string
		for _, r := range repeats {
			s = append(s, fmt.Sprintf("%.0f", r))
		}
		return 0, fmt.Errorf("replay: calibration: the repeats read %s tx/s, %.0f %% apart (at most %.0f %%): this machine's capacity moved while it was measured; run --calibrate again when it is quieter", strings.Join(s, ", "), 100*(hi/lo-1), 100*MaxCalibrationSpread)
	}
	return lo, nil
}

// Differs says how c's machine differs from this one (cores, memory,
// server), "" when it does not.
func (c *MachineCalibration) Differs(cores int, memoryGiB float64, postgres string) string {
	var d []string
	if c.Cores != cores {
		d = append(d, fmt.Sprintf("%d cores, not %d", c.Cores, cores))
	}
	if memoryGiB > 0 && (c.MemoryGiB/memoryGiB > 1.1 || memoryGiB/cmp.Or(c.MemoryGiB, 1) > 1.1) {
		d = append(d, fmt.Sprintf("%.0f GiB, not %.0f", c.MemoryGiB, memoryGiB))
	}
	if c.PostgreSQL != postgres {
		d = append(d, fmt.Sprintf("PostgreSQL %s, not %s", c.PostgreSQL, postgres))
	}
	return strings.Join(d, "; ")
}

// Calibrate measures the foreground's rate on be repeats times (the
// replay's calibration: a ramp of the foreground alone to its knee, a
// KneeShare of it) and returns it for this machine, or an error when the
// repeats disagree by more than MaxCalibrationSpread.
func (be *BlockEnv) Calibrate(ctx context.Context, repeats int, logf func(string, ...any)) (*MachineCalibration, error) {
	t0 := time.Now()
	cfg := Config{Cluster: be.c, Cores: be.cores, Scale: be.scale, Log: logf}
	cfg.fill()
	gen := newGenerator(be.fg, be.scale, cfg.ReadOnly, cfg.Workers)
	mc := &MachineCalibration{Cores: be.cores, MemoryGiB: MemoryGiB()}
	var err error
	if mc.PostgreSQL, err = serverVersion(ctx, be.admin); err != nil {
		return nil, err
	}
	for i := range max(1, repeats) {
		cfg.Seed = uint64(i + 1)
		cal, err := Calibrate(ctx, cfg, gen)
		if err != nil {
			return nil, err
		}
		logf("calibration %d of %d: %.0f tx/s (%s)", i+1, repeats, cal.Rate, cal.Why)
		mc.Repeats = append(mc.Repeats, cal.Rate)
	}
	if mc.Rate, err = AgreeingRepeats(mc.Repeats); err != nil {
		return nil, err
	}
	mc.At, mc.Took = time.Now().UTC().Truncate(time.Second), time.Since(t0).Round(time.Second)
	return mc, nil
}

// MemoryGiB is this machine's memory, 0 where /proc/meminfo says none.
func MemoryGiB() float64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var kb float64
		if _, err := fmt.Sscanf(line, "MemTotal: %f kB", &kb); err == nil {
			return math.Round(kb/(1<<20)*10) / 10
		}
	}
	return 0
}

// PostgreSQL is the server's version on be.
func (be *BlockEnv) PostgreSQL(ctx context.Context) (string, error) {
	return serverVersion(ctx, be.admin)
}
