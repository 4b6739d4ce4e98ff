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
)

// Dashboard is the part of Grafana's dashboard model we use.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	Tags          []string   `json:"tags"`
	Timezone      string     `json:"timezone"`
	SchemaVersion int        `json:"schemaVersion"`
	Refresh       string     `json:"refresh"`
	Time          TimeRange  `json:"time"`
	Templating    Templating `json:"templating"`
	Panels        []Panel    `json:"panels"`
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
	Defaults FieldDefaults `json:"defaults"`
}

// FieldDefaults are a panel's field defaults.
type FieldDefaults struct {
	Unit       string      `json:"unit"`
	Min        *float64    `json:"min,omitempty"`
	Thresholds *Thresholds `json:"thresholds,omitempty"`
	Mappings   []any       `json:"mappings,omitempty"`
	Links      []Link      `json:"links,omitempty"`
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
	mode.Description = "running, throttled, paused (a hold), critical (auto-paused, paged) or stale (a required signal unknown)."
	return Dashboard{
		UID: "throttled-overview", Title: "throttled: background work and database health", Tags: []string{"throttled", "postgres"},
		Timezone: "utc", SchemaVersion: 39, Refresh: "10s", Time: TimeRange{From: "now-1h", To: "now"}, Templating: variables(),
		Panels: []Panel{
			load,
			panel(3, "timeseries", "Background budget and job rates", "ops", GridPos{H: 8, W: 12, X: 12, Y: 0},
				[2]string{`max(throttled_controller_budget_batches_per_second{` + c + `})`, "budget"},
				[2]string{`sum by (job) (throttled_jobs_rate_batches_per_second{` + c + `})`, "{{job}}"}),
			mode,
			panel(4, "timeseries", "Connection headroom (free client slots)", "short", GridPos{H: 7, W: 8, X: 0, Y: 13},
				[2]string{`min(throttled_signals_value{signal="connection_headroom",` + c + `})`, "free slots"}),
			panel(5, "timeseries", "Replica lag", "s", GridPos{H: 7, W: 8, X: 8, Y: 13},
				[2]string{`max by (replica) (throttled_signals_value{signal="replica_lag_seconds",` + c + `})`, "{{replica}}"}),
			panel(6, "timeseries", "Rows per second, by job", "rowsps", GridPos{H: 7, W: 8, X: 16, Y: 13},
				[2]string{`sum by (job) (rate(throttled_jobs_rows_total{` + c + `}[$__rate_interval]))`, "{{job}}"}),
			panel(7, "timeseries", "Active holds, by source", "short", GridPos{H: 7, W: 8, X: 0, Y: 20},
				[2]string{`max by (source) (throttled_holds_active{` + c + `})`, "{{source}}"}),
			panel(8, "timeseries", "Sampler latency", "s", GridPos{H: 7, W: 8, X: 8, Y: 20},
				[2]string{`max by (server) (throttled_signals_sample_duration_seconds{` + c + `})`, "{{server}}"}),
			panel(9, "timeseries", "Sampler failures", "ops", GridPos{H: 7, W: 8, X: 16, Y: 20},
				[2]string{`sum by (server) (rate(throttled_signals_sample_failures_total{` + c + `}[$__rate_interval]))`, "{{server}}"}),
		},
	}
}

// Jobs shows each job's state and work.
func Jobs() Dashboard {
	table := panel(1, "table", "Jobs", "short", GridPos{H: 8, W: 24, X: 0, Y: 0},
		[2]string{`max by (job) (throttled_jobs_rate_batches_per_second{` + c + `})`, ""},
		[2]string{`max by (job) (throttled_jobs_paused{` + c + `})`, ""},
		[2]string{`max by (job) (throttled_jobs_batch_size{` + c + `})`, ""},
		[2]string{`sum by (job) (increase(throttled_jobs_rows_total{` + c + `}[$__rate_interval]))`, ""})
	for i := range table.Targets {
		table.Targets[i].Instant, table.Targets[i].Format = true, "table"
	}
	// Each row links to the confirm page for its job: the person sees the
	// job's state and the database's signals, gives a reason and a TTL,
	// and comes back here.
	back := "&return=${grafana_url:percentencode}%2Fd%2Fthrottled-jobs"
	table.FieldConfig.Defaults.Links = []Link{
		{Title: "Pause…", URL: "${throttled_url}/ui/pause?job=${__data.fields.job:percentencode}" + back},
		{Title: "Resume…", URL: "${throttled_url}/ui/resume?job=${__data.fields.job:percentencode}" + back},
	}
	return Dashboard{
		UID: "throttled-jobs", Title: "throttled: jobs", Tags: []string{"throttled", "postgres"},
		Timezone: "utc", SchemaVersion: 39, Refresh: "10s", Time: TimeRange{From: "now-1h", To: "now"}, Templating: variables(),
		Panels: []Panel{
			table,
			panel(2, "timeseries", "Rate, by job", "ops", GridPos{H: 7, W: 12, X: 0, Y: 8},
				[2]string{`max by (job) (throttled_jobs_rate_batches_per_second{` + c + `})`, "{{job}}"}),
			panel(3, "timeseries", "Errors per second, by job", "ops", GridPos{H: 7, W: 12, X: 12, Y: 8},
				[2]string{`sum by (job) (rate(throttled_jobs_errors_total{` + c + `}[$__rate_interval]))`, "{{job}}"}),
			panel(4, "timeseries", "Token wait, p95, by job", "s", GridPos{H: 7, W: 12, X: 0, Y: 15},
				[2]string{`histogram_quantile(0.95, sum by (job, le) (rate(throttled_jobs_wait_seconds_bucket{` + c + `}[$__rate_interval])))`, "{{job}}"}),
			panel(5, "timeseries", "Batches per second, by job", "ops", GridPos{H: 7, W: 12, X: 12, Y: 15},
				[2]string{`sum by (job) (rate(throttled_jobs_batches_total{` + c + `}[$__rate_interval]))`, "{{job}}"}),
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
