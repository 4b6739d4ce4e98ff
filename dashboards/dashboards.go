// Package dashboards generates throttled's Grafana dashboards. The JSON
// files beside this source are its output; a test fails when they differ
// (regenerate with `go test ./dashboards -run Generated -update`), and
// another when a panel uses a metric throttled does not export, a panel
// lacks a unit or the datasource variable, or a rate lacks
// $__rate_interval.
//
// Every query filters on a `cluster` label, which the Prometheus scrape
// configuration adds to throttled's targets (one value per database
// cluster).
package dashboards

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Dashboard is the part of Grafana's dashboard model we use.
type Dashboard struct {
	UID           string      `json:"uid"`
	Title         string      `json:"title"`
	Tags          []string    `json:"tags"`
	Timezone      string      `json:"timezone"`
	SchemaVersion int         `json:"schemaVersion"`
	Refresh       string      `json:"refresh"`
	Time          TimeRange   `json:"time"`
	Templating    Templating  `json:"templating"`
	Annotations   Annotations `json:"annotations"`
	Panels        []Panel     `json:"panels"`
}

// Annotations holds the annotation queries.
type Annotations struct {
	List []Annotation `json:"list"`
}

// Annotation is one annotation query: a Prometheus query whose series
// become regions (consecutive samples of a series merge into one region
// from its first sample to its last), or Grafana's own annotations by tag.
type Annotation struct {
	Name        string     `json:"name"`
	Datasource  Datasource `json:"datasource"`
	Enable      bool       `json:"enable"`
	Hide        bool       `json:"hide"`
	IconColor   string     `json:"iconColor"`
	BuiltIn     int        `json:"builtIn,omitempty"`
	Type        string     `json:"type,omitempty"`
	Expr        string     `json:"expr,omitempty"`
	Step        string     `json:"step,omitempty"`
	TitleFormat string     `json:"titleFormat,omitempty"`
	TextFormat  string     `json:"textFormat,omitempty"`
	TagKeys     string     `json:"tagKeys,omitempty"`
	// UseValueForTime false: a series' samples are the region.
	UseValueForTime bool `json:"useValueForTime"`
	// Target filters Grafana's own annotations (the ones the sidecar
	// pushes) by tag.
	Target *GrafanaTarget `json:"target,omitempty"`
}

// GrafanaTarget selects Grafana annotations by tag.
type GrafanaTarget struct {
	Type     string   `json:"type"`
	Tags     []string `json:"tags"`
	Limit    int      `json:"limit"`
	MatchAny bool     `json:"matchAny"`
}

// TimeRange is the default range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Templating holds the variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a dashboard variable.
type Variable struct {
	Name       string      `json:"name"`
	Label      string      `json:"label"`
	Type       string      `json:"type"`
	Query      any         `json:"query"`
	Datasource *Datasource `json:"datasource,omitempty"`
	Refresh    int         `json:"refresh,omitempty"`
	IncludeAll bool        `json:"includeAll,omitempty"`
	Multi      bool        `json:"multi,omitempty"`
}

// Datasource references the datasource variable.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is one panel.
type Panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description,omitempty"`
	GridPos     GridPos     `json:"gridPos"`
	Datasource  Datasource  `json:"datasource"`
	Targets     []Target    `json:"targets"`
	FieldConfig FieldConfig `json:"fieldConfig"`
	Options     any         `json:"options,omitempty"`
	// Transformations join a table's queries into one row per job.
	Transformations []any `json:"transformations,omitempty"`
}

// GridPos places a panel.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one query.
type Target struct {
	RefID        string     `json:"refId"`
	Expr         string     `json:"expr"`
	LegendFormat string     `json:"legendFormat,omitempty"`
	Datasource   Datasource `json:"datasource"`
	Instant      bool       `json:"instant,omitempty"`
	Format       string     `json:"format,omitempty"`
}

// FieldConfig carries the unit and thresholds.
type FieldConfig struct {
	Defaults  FieldDefaults `json:"defaults"`
	Overrides []Override    `json:"overrides,omitempty"`
}

// Override sets properties of the fields a matcher picks (a table
// column's unit, say).
type Override struct {
	Matcher    Matcher    `json:"matcher"`
	Properties []Property `json:"properties"`
}

// Matcher picks fields.
type Matcher struct {
	ID      string `json:"id"`
	Options string `json:"options"`
}

// Property is one field property.
type Property struct {
	ID    string `json:"id"`
	Value any    `json:"value"`
}

// FieldDefaults are a panel's field defaults.
type FieldDefaults struct {
	Unit       string      `json:"unit"`
	Min        *float64    `json:"min,omitempty"`
	Thresholds *Thresholds `json:"thresholds,omitempty"`
	Mappings   []any       `json:"mappings,omitempty"`
	Links      []Link      `json:"links,omitempty"`
	// Custom is the panel type's own field options (a time series'
	// stacking and fill).
	Custom map[string]any `json:"custom,omitempty"`
}

// Link is a data link: a URL per row or point, with its fields and
// variables interpolated by Grafana.
type Link struct {
	Title       string `json:"title"`
	URL         string `json:"url"`
	TargetBlank bool   `json:"targetBlank"`
}

// Thresholds draw target and critical lines.
type Thresholds struct {
	Mode  string `json:"mode"`
	Steps []Step `json:"steps"`
}

// Step is one threshold.
type Step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

var ds = Datasource{Type: "prometheus", UID: "${datasource}"}

func f(v float64) *float64 { return &v }

func variables() Templating {
	return Templating{List: []Variable{
		{Name: "datasource", Label: "Prometheus", Type: "datasource", Query: "prometheus"},
		{Name: "cluster", Label: "Cluster", Type: "query", Datasource: &ds, Refresh: 2,
			Query: map[string]string{"query": "label_values(throttled_build_info, cluster)", "refId": "cluster"}},
		// Where the Pause… and Resume… links go: the sidecar's confirm
		// page, and back to this Grafana (which must be in the sidecar's
		// grafana.return_urls).
		{Name: "throttled_url", Label: "throttled URL", Type: "textbox", Query: "http://localhost:8080"},
		{Name: "grafana_url", Label: "Grafana URL", Type: "textbox", Query: "http://localhost:3000"},
	}}
}

// annotations: holds (from the holds_info metric: one region per hold,
// titled by source and scope, with the reason and who made it), the
// controller's own pauses (critical, stale), and the annotations the
// sidecar pushes to Grafana when it has a Grafana URL and token.
func annotations() Annotations {
	return Annotations{List: []Annotation{
		{Name: "Holds", Datasource: ds, Enable: true, IconColor: "orange", Step: "10s",
			Expr:        `max by (id, scope, source, actor, reason) (throttled_holds_info{` + c + `})`,
			TitleFormat: "{{source}} hold {{id}} on {{scope}}", TextFormat: "{{reason}} (by {{actor}})", TagKeys: "source,scope"},
		{Name: "Auto-pauses", Datasource: ds, Enable: true, IconColor: "red", Step: "10s",
			Expr:        `max by (mode) (throttled_controller_mode{mode=~"critical|stale",` + c + `}) > 0`,
			TitleFormat: "{{mode}}", TextFormat: "the controller paused every job ({{mode}})", TagKeys: "mode"},
		// Off by default: it repeats the Holds regions here; it is
		// for the database's own dashboards, which lack our metrics.
		{Name: "throttled (pushed to Grafana)", Datasource: Datasource{Type: "grafana", UID: "-- Grafana --"}, Enable: false, IconColor: "purple",
			BuiltIn: 0, Type: "tags", Target: &GrafanaTarget{Type: "tags", Tags: []string{"throttled"}, Limit: 100}},
	}}
}

// panel builds a panel; x, y, w, h place it.
func panel(id int, typ, title, unit string, pos GridPos, exprs ...[2]string) Panel {
	p := Panel{ID: id, Type: typ, Title: title, GridPos: pos, Datasource: ds, FieldConfig: FieldConfig{Defaults: FieldDefaults{Unit: unit}}}
	for i, e := range exprs {
		p.Targets = append(p.Targets, Target{RefID: string(rune('A' + i)), Expr: e[0], LegendFormat: e[1], Datasource: ds})
	}
	return p
}

const c = `cluster=~"$cluster"`

// Overview shows the background work beside the database's health on one
// time axis: which job was writing when the primary climbed.
func Overview() Dashboard {
	load := panel(2, "timeseries", "Primary load (on-CPU sessions per core)", "short", GridPos{H: 8, W: 12, X: 0, Y: 0},
		[2]string{`max(throttled_signals_value{signal="primary_load",` + c + `})`, "primary_load"})
	load.FieldConfig.Defaults.Thresholds = &Thresholds{Mode: "absolute", Steps: []Step{{Color: "green", Value: nil}, {Color: "orange", Value: f(0.7)}, {Color: "red", Value: f(1)}}}
	load.Options = map[string]any{"legend": map[string]any{"displayMode": "list"}}
	load.Description = "Orange: target (0.7); red: critical (1.0): three samples at it pause every job and page."
	mode := panel(1, "state-timeline", "Mode", "none", GridPos{H: 5, W: 24, X: 0, Y: 8},
		[2]string{`max by (mode) (throttled_controller_mode{` + c + `}) > 0`, "{{mode}}"})
	mode.Description = "running, throttled, paused (a hold), critical (auto-paused, paged) or stale (a required signal unknown). The reason in words, with its numbers, is in GET /v1/status; holds show as annotation regions."
	binding := panel(10, "state-timeline", "Binding signal (the one pacing the work)", "none", GridPos{H: 4, W: 24, X: 0, Y: 27},
		[2]string{`max by (signal) (throttled_controller_binding{` + c + `}) > 0`, "{{signal}}"})
	binding.Description = "The signal under the most pressure against its target: what to fix to let the background work go faster."
	horizon := panel(11, "timeseries", "Vacuum horizon age (oldest snapshot, slot, prepared xact or standby)", "s", GridPos{H: 7, W: 8, X: 0, Y: 31},
		[2]string{`max(throttled_signals_value{signal="xmin_horizon_age_seconds",` + c + `})`, "seconds"})
	horizon.Description = "While something old holds the xmin horizon back, vacuum cannot remove what a cleanup deletes: the job makes bloat, not space. The holder is in throttled_signals_xmin_horizon_holder's labels, and in GET /v1/status."
	slots := panel(12, "timeseries", "WAL retained by replication slots", "bytes", GridPos{H: 7, W: 8, X: 8, Y: 31},
		[2]string{`max by (slot) (throttled_signals_slot_retained_bytes{` + c + `})`, "{{slot}}"})
	slots.Description = "Every byte a job writes stays on the primary's disk while a slot's consumer (a replica, a CDC pipeline) does not read it."
	wrap := panel(13, "timeseries", "Wraparound: oldest database's age over autovacuum_freeze_max_age", "percentunit", GridPos{H: 7, W: 8, X: 16, Y: 31},
		[2]string{`max(throttled_signals_value{signal="wraparound_fraction",` + c + `})`, "fraction"})
	wrap.Description = "At 100 % autovacuum must freeze the whole database, whatever else runs."
	vacuums := panel(14, "timeseries", "Vacuums in progress", "short", GridPos{H: 7, W: 12, X: 0, Y: 38},
		[2]string{`max(throttled_signals_value{signal="vacuum_running_tables",` + c + `})`, "tables being vacuumed"},
		[2]string{`max(throttled_signals_value{signal="antiwraparound_vacuums",` + c + `})`, "anti-wraparound vacuums"})
	vacuums.Description = "A job rule on vacuum_running pauses a job (state paused, why gated) while a vacuum runs on a table it writes; which tables are in throttled_signals_vacuum_running's table label, and the job's reason in GET /v1/status."
	gatedJobs := panel(15, "timeseries", "Jobs gated, held by a window, or held", "short", GridPos{H: 7, W: 12, X: 12, Y: 38},
		[2]string{`count(max by (throttled_job) (throttled_jobs_state{why="gated",` + c + `})) or vector(0)`, "gated by a job rule"},
		[2]string{`max(throttled_holds_active{source="window",` + c + `})`, "held by a run or maintenance window"},
		[2]string{`sum(throttled_holds_active{source!="window",` + c + `})`, "held by a person or an alert"})
	gatedJobs.Description = "Gated: a job rule that binds the job (a vacuum on its tables, a custom signal) reads over its target or cannot be read; the other jobs run. Windows: outside a job's run window or inside a maintenance window it avoids; the regions show as hold annotations."
	app := appPanels(45)
	return Dashboard{
		UID: "throttled-overview", Title: "throttled: background work and database health", Tags: []string{"throttled", "postgres"},
		Timezone: "utc", SchemaVersion: 39, Refresh: "10s", Time: TimeRange{From: "now-1h", To: "now"}, Templating: variables(), Annotations: annotations(),
		Panels: []Panel{
			load,
			panel(3, "timeseries", "Background budget and job rates", "ops", GridPos{H: 8, W: 12, X: 12, Y: 0},
				[2]string{`max(throttled_controller_budget_batches_per_second{` + c + `})`, "budget"},
				[2]string{`sum by (throttled_job) (throttled_jobs_rate_batches_per_second{` + c + `})`, "{{throttled_job}}"}),
			mode,
			panel(4, "timeseries", "Connection headroom (free client slots)", "short", GridPos{H: 7, W: 8, X: 0, Y: 13},
				[2]string{`min(throttled_signals_value{signal="connection_headroom",` + c + `})`, "free slots"}),
			panel(5, "timeseries", "Replica lag", "s", GridPos{H: 7, W: 8, X: 8, Y: 13},
				[2]string{`max by (replica) (throttled_signals_value{signal="replica_lag_seconds",` + c + `})`, "{{replica}}"}),
			panel(6, "timeseries", "Rows per second, by job", "rowsps", GridPos{H: 7, W: 8, X: 16, Y: 13},
				[2]string{`sum by (throttled_job) (rate(throttled_jobs_rows_total{` + c + `}[$__rate_interval]))`, "{{throttled_job}}"}),
			panel(7, "timeseries", "Active holds, by source", "short", GridPos{H: 7, W: 8, X: 0, Y: 20},
				[2]string{`max by (source) (throttled_holds_active{` + c + `})`, "{{source}}"}),
			panel(8, "timeseries", "Sampler latency", "s", GridPos{H: 7, W: 8, X: 8, Y: 20},
				[2]string{`max by (server) (throttled_signals_sample_duration_seconds{` + c + `})`, "{{server}}"}),
			panel(9, "timeseries", "Sampler failures", "ops", GridPos{H: 7, W: 8, X: 16, Y: 20},
				[2]string{`sum by (server) (rate(throttled_signals_sample_failures_total{` + c + `}[$__rate_interval]))`, "{{server}}"}),
			binding,
			horizon, slots, wrap,
			vacuums, gatedJobs,
			app[0], app[1], app[2], app[3],
		},
	}
}

// promSignals is the join that keeps, of a query by signal, the
// Prometheus signals (of a baseline, when given): whatever the operator
// named them, each shows by its name, with no list to keep up.
func promSignals(baseline string) string {
	sel := c
	if baseline != "" {
		sel = `baseline="` + baseline + `",` + c
	}
	return ` and on (signal) max by (signal) (throttled_signals_prometheus_info{` + sel + `})`
}

// appPanels are the Prometheus signals' panels (the application's own
// latency, apdex or error rate), at row y: each selects the signals by
// throttled_signals_prometheus_info, so a signal added to the
// configuration shows without a change here.
func appPanels(y int) [4]Panel {
	ratio := panel(16, "timeseries", "Application signals (Prometheus): over their job-free baseline", "short", GridPos{H: 8, W: 12, X: 0, Y: y},
		[2]string{`max by (signal) (throttled_signals_value{` + c + `})` + promSignals("job-free"), "{{signal}}"})
	ratio.Description = "Each Prometheus signal with baseline job-free, as the controller judges it: the reading over its level while no job was at work, 1.0 at it. A rule's target (such as 1.1) and critical level are multiples of that level. Absent while the signal is blind or warming up (the panel beside shows which)."
	levels := panel(17, "timeseries", "Application signals (Prometheus): readings and job-free baselines", "short", GridPos{H: 8, W: 12, X: 12, Y: y},
		[2]string{`max by (signal) (throttled_signals_value{` + c + `})` + promSignals("none"), "{{signal}}"},
		[2]string{`max by (signal) (throttled_signals_value{` + c + `}) * on (signal) max by (signal) (throttled_signals_baseline{` + c + `})`, "{{signal}}"},
		[2]string{`max by (signal) (throttled_signals_baseline{` + c + `})`, "{{signal}} job-free baseline"})
	levels.Description = "Each Prometheus signal's reading in its own unit (seconds for a p99, a fraction for an apdex), and for those with baseline job-free the level learnt while no job was at work: the reading over it is the ratio beside. A baseline that climbs with the jobs is the foreground's own growth, measured in their rests."
	age := panel(18, "timeseries", "Application signals (Prometheus): age of their data", "s", GridPos{H: 7, W: 12, X: 0, Y: y + 8},
		[2]string{`max by (signal) (throttled_signals_age_seconds{` + c + `})` + promSignals(""), "{{signal}}"})
	age.Description = "Dated by the newest sample of the series each query reads, not by when Prometheus answered: a scrape that stopped ages here, and past the rule's max_age the signal is stale and the jobs it binds hold."
	blind := panel(19, "state-timeline", "Application signals (Prometheus): blind", "none", GridPos{H: 7, W: 12, X: 12, Y: y + 8},
		[2]string{`max by (signal) (throttled_signals_failed{` + c + `})` + promSignals(""), "{{signal}}"})
	blind.FieldConfig.Defaults.Mappings = []any{map[string]any{"type": "value", "options": map[string]any{
		"0": map[string]any{"text": "reading", "color": "green"},
		"1": map[string]any{"text": "blind", "color": "red"}}}}
	blind.Description = "Blind: the last reading failed (a query error, a timeout, Prometheus down or refusing the credentials, more than one series, NaN with traffic) or is still warming up. The jobs a required rule on it binds hold; why, in words, is in throttled status and GET /v1/status, and a stale pause pages after a while."
	return [4]Panel{ratio, levels, age, blind}
}

// Jobs shows each job's state and work.
func Jobs() Dashboard {
	rows := `sum by (throttled_job) (rate(throttled_jobs_rows_total{` + c + `}[$__rate_interval]))`
	table := panel(1, "table", "Jobs", "short", GridPos{H: 8, W: 24, X: 0, Y: 0},
		[2]string{`max by (throttled_job, state, why) (throttled_jobs_state{` + c + `})`, ""},
		[2]string{`max by (throttled_job) (throttled_jobs_rate_batches_per_second{` + c + `})`, ""},
		[2]string{`max by (throttled_job) (throttled_jobs_batch_size{` + c + `})`, ""},
		[2]string{`sum by (throttled_job) (increase(throttled_jobs_rows_total{` + c + `}[$__range]))`, ""},
		[2]string{rows, ""},
		[2]string{`max by (throttled_job) (throttled_jobs_remaining_rows{` + c + `}) / ` + rows, ""})
	for i := range table.Targets {
		table.Targets[i].Instant, table.Targets[i].Format = true, "table"
	}
	table.Description = "One row per job: its state and why (the word of Where each job's time went: hold:<source>, the binding signal's name, full_rate, growth, slow_start, critical, stale, gated, unavailable, ...), its allocated rate, last batch size, rows done in the dashboard's time range and per second, and the time left at that pace (for workers that report what remains). Pause… and Resume… open throttled's confirm page."
	// One row per job: merge the instant queries on their labels, name
	// the value columns, and give each its unit.
	names := []string{"state", "Rate", "Batch size", "Rows (time range)", "Rows/s", "ETA"}
	rename := map[string]string{}
	for i, n := range names[1:] {
		rename["Value #"+string(rune('B'+i))] = n
	}
	table.Transformations = []any{
		map[string]any{"id": "merge", "options": map[string]any{}},
		map[string]any{"id": "organize", "options": map[string]any{
			"excludeByName": map[string]bool{"Time": true, "Value #A": true},
			"indexByName":   map[string]int{"throttled_job": 0, "state": 1, "why": 2, "Value #B": 3, "Value #C": 4, "Value #D": 5, "Value #E": 6, "Value #F": 7},
			"renameByName":  rename,
		}},
	}
	for col, unit := range map[string]string{"Rate": "ops", "Rows/s": "rowsps", "ETA": "s", "Batch size": "short", "Rows (time range)": "short"} {
		table.FieldConfig.Overrides = append(table.FieldConfig.Overrides, Override{Matcher: Matcher{ID: "byName", Options: col},
			Properties: []Property{{ID: "unit", Value: unit}}})
	}
	slices.SortFunc(table.FieldConfig.Overrides, func(a, b Override) int { return strings.Compare(a.Matcher.Options, b.Matcher.Options) })
	// Each row links to the confirm page for its job: the person sees the
	// job's state and the database's signals, gives a reason and a TTL,
	// and comes back here.
	back := "&return=${grafana_url:percentencode}%2Fd%2Fthrottled-jobs"
	table.FieldConfig.Defaults.Links = []Link{
		{Title: "Pause…", URL: "${throttled_url}/ui/pause?job=${__data.fields.throttled_job:percentencode}" + back},
		{Title: "Resume…", URL: "${throttled_url}/ui/resume?job=${__data.fields.throttled_job:percentencode}" + back},
	}
	// Where the time went: each job's seconds at each limit per second,
	// a share of its time, stacked.
	limited := panel(6, "timeseries", "Where each job's time went (share of time at each limit)", "percentunit", GridPos{H: 8, W: 24, X: 0, Y: 22},
		[2]string{`sum by (throttled_job, why) (rate(throttled_jobs_limited_seconds_total{` + c + `}[$__rate_interval]))`, "{{throttled_job}}: {{why}}"})
	limited.FieldConfig.Defaults.Min = f(0)
	limited.FieldConfig.Defaults.Custom = map[string]any{"stacking": map[string]any{"mode": "normal", "group": "A"}, "fillOpacity": 60, "lineWidth": 1}
	limited.Options = map[string]any{"legend": map[string]any{"displayMode": "table", "placement": "right", "calcs": []string{"mean"}},
		"tooltip": map[string]any{"mode": "multi", "sort": "desc"}}
	limited.Description = "Why each job runs at the pace it does, as a share of its time: full_rate (at its max_rate), growth (nothing binds, the budget grows), a signal's name (that signal limits it: foreground_latency, primary_load, replica_lag_seconds, ..., or a Prometheus signal's own, such as api_p99), batch_errors, slow_start, breach_memory (below the budget that breached a target a while ago), hold:<source> (paused or scaled by a hold), critical, stale, gated, warming_up, unavailable. One job's bands add up to 100 %. A job that crawls: its largest band is what to fix. exec prints the same at its end, and GET /v1/status has it as limited_seconds and why_slow."
	return Dashboard{
		UID: "throttled-jobs", Title: "throttled: jobs", Tags: []string{"throttled", "postgres"},
		Timezone: "utc", SchemaVersion: 39, Refresh: "10s", Time: TimeRange{From: "now-1h", To: "now"}, Templating: variables(), Annotations: annotations(),
		Panels: []Panel{
			table,
			panel(2, "timeseries", "Rate, by job", "ops", GridPos{H: 7, W: 12, X: 0, Y: 8},
				[2]string{`max by (throttled_job) (throttled_jobs_rate_batches_per_second{` + c + `})`, "{{throttled_job}}"}),
			panel(3, "timeseries", "Errors per second, by job", "ops", GridPos{H: 7, W: 12, X: 12, Y: 8},
				[2]string{`sum by (throttled_job) (rate(throttled_jobs_errors_total{` + c + `}[$__rate_interval]))`, "{{throttled_job}}"}),
			panel(4, "timeseries", "Token wait, p95, by job", "s", GridPos{H: 7, W: 12, X: 0, Y: 15},
				[2]string{`histogram_quantile(0.95, sum by (throttled_job, le) (rate(throttled_jobs_wait_seconds_bucket{` + c + `}[$__rate_interval])))`, "{{throttled_job}}"}),
			panel(5, "timeseries", "Batches per second, by job", "ops", GridPos{H: 7, W: 12, X: 12, Y: 15},
				[2]string{`sum by (throttled_job) (rate(throttled_jobs_batches_total{` + c + `}[$__rate_interval]))`, "{{throttled_job}}"}),
			limited,
		},
	}
}

// All returns every dashboard by file name.
func All() map[string]Dashboard {
	return map[string]Dashboard{"overview.json": Overview(), "jobs.json": Jobs()}
}

// Marshal renders d as the committed JSON.
func Marshal(d Dashboard) []byte {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("dashboards: %v", err))
	}
	return append(b, '\n')
}
