package replay

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/prometheus/procfs"
)

// Steal time. On a virtual machine the hypervisor can give the guest's
// CPUs to other guests while the guest's processes want them: /proc/stat
// counts that time as steal. On this benchmark's 2-core VM it came in
// bursts: four runs of surge's foreground alone, minutes apart, read p99s
// of 425, 39 and 53 ms at 42-47 % steal (stealShare) and 3.1 ms at 1.8 %.
// Such a run measures the neighbours, not the policy, so Run discards it
// and runs it again (Config.MaxSteal, Config.Reruns), and every kept run
// reports its steal.

// DefaultMaxSteal is the steal share over which a run is run again: 3 % of
// the CPU time the machine's processes wanted. With it, the fixed rates
// of surge whose runs stayed under it (0.2-0.7 %) read 0.94, 1.15 and
// 1.52 times foreground alone's p99, in the order of their rates; without
// it, one replay's sweep read 0.58, 2.62, 15.25 and 4.05 for rising rates.
const DefaultMaxSteal = 0.03

// DefaultReruns is how many times, by default, a run disturbed by steal
// is run again before the last one is kept and marked.
const DefaultReruns = 2

// stealUnknown is Result.Steal where /proc/stat cannot be read (not
// Linux): such a run is never discarded.
const stealUnknown = -1

// hostCPU reads the machine's CPU time counters.
func hostCPU() (procfs.CPUStat, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return procfs.CPUStat{}, err
	}
	st, err := fs.Stat()
	if err != nil {
		return procfs.CPUStat{}, err
	}
	return st.CPUTotal, nil
}

// stealShare is the share of the CPU time the machine's processes wanted
// between a and b that the hypervisor gave elsewhere: steal over busy plus
// steal (guest time is already counted in user). 0 when nothing was
// wanted.
func stealShare(a, b procfs.CPUStat) float64 {
	busy := func(c procfs.CPUStat) float64 {
		return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	}
	wanted := busy(b) - busy(a)
	if wanted <= 0 {
		return 0
	}
	return max(0, b.Steal-a.Steal) / wanted
}

// stealMeter measures the steal share over a run's window.
type stealMeter struct {
	at  procfs.CPUStat
	err error
}

func startSteal() stealMeter {
	at, err := hostCPU()
	return stealMeter{at: at, err: err}
}

// share returns the steal share since the meter started, or stealUnknown.
func (m stealMeter) share() float64 {
	if m.err != nil {
		return stealUnknown
	}
	now, err := hostCPU()
	if err != nil {
		return stealUnknown
	}
	return stealShare(m.at, now)
}

// undisturbed calls run until it returns a value whose steal share is
// at most maxSteal (a negative maxSteal keeps the first), at most
// reruns+1 times. Each value it does not keep goes to discard; the last
// is kept whatever its steal, and the bool says it was over. An error
// ends it.
func undisturbed[T any](maxSteal float64, reruns int, steal func(T) float64, run func() (T, error), discard func(T)) (T, bool, error) {
	for try := 0; ; try++ {
		v, err := run()
		if err != nil {
			return v, false, err
		}
		over := maxSteal >= 0 && steal(v) > maxSteal
		if !over || try >= reruns {
			return v, over, nil
		}
		discard(v)
	}
}

// stealText formats a steal share for the tables.
func stealText(s float64) string {
	if s < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", 100*s)
}

// secondSteal returns the steal share of second i of a per-second
// series, or stealUnknown where the series does not reach it.
func secondSteal(perSec []float64, i int) float64 {
	if i < 0 || i >= len(perSec) {
		return stealUnknown
	}
	return perSec[i]
}

// ShieldClient raises the scheduling priority of every thread of this
// process (the foreground's generator, and the jobs' clients beside it) to
// nice: the database's processes, started before, keep theirs. Threads
// made later inherit it from the thread that makes them. On two cores
// the generator shares the CPU with the job's backend, and its own wait
// would count as the database's harm; see Second.Client. Needs the
// privilege to lower a nice value (root, or CAP_SYS_NICE).
func ShieldClient(nice int) error {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("replay: shield the client: %w", err)
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("replay: shield the client: thread %d to nice %d: %w", tid, nice, err)
		}
	}
	return nil
}
