package config

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/throttled/throttled/internal/jobname"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle/hold"
)

// Job is a job's configuration.
type Job struct {
	Name                     string
	Weight, MinRate, MaxRate float64
	// MinBatchSize, MaxBatchSize and TargetBatchDuration, when set (not
	// 0), bound the batch size of the job's remote workers: the sidecar
	// sends them with every token, and they replace the worker's own.
	MinBatchSize, MaxBatchSize int
	TargetBatchDuration        time.Duration
	// Tables are the tables the job writes (schema.table); Signals the job
	// rules that bind it, nil for every one.
	Tables, Signals []string
}

// buildJobs reads the job blocks.
func (c *Config) buildJobs(doc *file, v *validator) {
	maint := c.buildMaintenance(doc, v)
	c.Windows = hold.Windows{}
	for _, j := range doc.Jobs {
		if p := jobname.Problem(j.Name); p != "" {
			v.bad(j.Range, "job %q: name %s", j.Name, p)
		}
		if !v.first(j.Range, "job", j.Name) {
			continue
		}
		job := Job{Name: j.Name, Weight: 1, TargetBatchDuration: v.duration(j.Range, "target_batch_duration", j.TargetBatchDuration, 0)}
		for _, f := range []struct {
			src *float64
			dst *float64
		}{{j.Weight, &job.Weight}, {j.MinRate, &job.MinRate}, {j.MaxRate, &job.MaxRate}} {
			if f.src != nil {
				*f.dst = *f.src
			}
		}
		if j.Weight != nil && *j.Weight == 0 {
			v.bad(j.Range, "job %q: weight must be positive, got 0 (leave it out for 1)", j.Name)
		}
		for _, p := range jobname.LimitProblems(job.Weight, job.MinRate, job.MaxRate, jobname.LimitNames{Weight: "weight", MinRate: "min_rate", MaxRate: "max_rate"}) {
			v.bad(j.Range, "job %q: %s", j.Name, p)
		}
		if j.MinBatchSize != nil {
			job.MinBatchSize = *j.MinBatchSize
		}
		if j.MaxBatchSize != nil {
			job.MaxBatchSize = *j.MaxBatchSize
		}
		if job.MinBatchSize < 0 || job.MaxBatchSize < 0 || (job.MaxBatchSize > 0 && job.MinBatchSize > job.MaxBatchSize) {
			v.bad(j.Range, "job %q: batch sizes min %d and max %d must be positive with min not above max", j.Name, job.MinBatchSize, job.MaxBatchSize)
		}
		for _, t := range j.Tables {
			if strings.TrimSpace(t) == "" || strings.Count(signals.TableName(t), ".") != 1 && !strings.Contains(t, `"`) {
				v.bad(j.Range, "job %q: tables: %q is not a table name; want schema.table or table (in public)", j.Name, t)
				continue
			}
			job.Tables = append(job.Tables, signals.TableName(t))
		}
		if j.Signals != nil {
			job.Signals = []string{}
		}
		for _, n := range j.Signals {
			_, rule := c.JobRules[signals.Name(n)]
			switch name := signals.Name(n); {
			case rule:
				job.Signals = append(job.Signals, n)
			case signals.Known(name) && !c.jobRule(name):
				v.bad(j.Range, "job %q: signals: %q is a cluster signal: it paces every job, whatever a job says; a job names job rules (vacuum_running, antiwraparound_vacuums, custom signals)", j.Name, n)
			default:
				v.bad(j.Range, "job %q: signals: %q has no signal block with a target; %s", j.Name, n, c.jobRuleNames())
			}
		}
		c.buildWindows(j, maint, v)
		if slices.Contains(job.Signals, string(signals.VacuumRunning)) && len(job.Tables) == 0 {
			v.bad(j.Range, "job %q: signals names vacuum_running but tables is empty: it would never bind; list the tables the job writes", j.Name)
		}
		c.Jobs = append(c.Jobs, job)
	}
}

// buildMaintenance reads the maintenance blocks: named windows.
func (c *Config) buildMaintenance(doc *file, v *validator) map[string]hold.Window {
	out := map[string]hold.Window{}
	for _, m := range doc.Maint {
		if !v.first(m.Range, "maintenance", m.Name) {
			continue
		}
		if p := jobname.Problem(m.Name); p != "" {
			v.bad(m.Range, "maintenance %q: name %s", m.Name, p)
		}
		w, err := hold.ParseWindow(m.Window)
		if err != nil {
			v.bad(m.Range, "maintenance %q: %v", m.Name, err)
			continue
		}
		out[m.Name] = w
	}
	return out
}

// buildWindows reads a job's run_windows and the maintenance windows it
// avoids.
func (c *Config) buildWindows(j jobBlock, maint map[string]hold.Window, v *validator) {
	var jw hold.JobWindows
	for _, spec := range j.RunWindows {
		w, err := hold.ParseWindow(spec)
		if err != nil {
			v.bad(j.Range, "job %q: run_windows: %v", j.Name, err)
			continue
		}
		jw.Run = append(jw.Run, w)
	}
	for _, name := range j.Avoid {
		w, ok := maint[name]
		if !ok {
			known := slices.Sorted(maps.Keys(maint))
			v.bad(j.Range, "job %q: avoid: no maintenance block %q (maintenance blocks: %v)", j.Name, name, known)
			continue
		}
		if jw.Avoid == nil {
			jw.Avoid = map[string]hold.Window{}
		}
		jw.Avoid[name] = w
	}
	if len(jw.Run) > 0 || len(jw.Avoid) > 0 {
		c.Windows[j.Name] = jw
	}
}
