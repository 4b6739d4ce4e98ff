package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"slices"
)

// commandHelp is what `throttled <command> -h` (and `throttled help
// <command>`) says beyond the flags: what the command does, the
// environment it reads, and examples.
type commandHelp struct {
	// synopsis replaces "[flags]" in the usage line, where the flags
	// combine in a way worth saying.
	synopsis string
	about    string
	env      []string
	examples []string
}

// dsnEnv is the environment the commands that reach the database read.
var dsnEnv = []string{"THROTTLED_PRIMARY_DSN  the primary's connection string, when --primary-dsn is not given (keeps the password out of the process list)"}

// holdsEnv is the environment of the commands that act on holds, directly
// or through a sidecar.
var holdsEnv = append(slices.Clip(dsnEnv), "THROTTLED_TOKEN  the token for --addr")

var helps = map[string]commandHelp{
	"run": {about: "The sidecar: samples the primary (while it leads the cluster), paces the configured jobs and the remote workers, and serves the HTTP API. The file is checked offline and against the cluster first; SIGHUP or POST /v1/reload reloads it, whole or not at all.",
		env:      []string{"the variables the file's env() calls name", "NOTIFY_SOCKET  systemd's, for READY, RELOADING and STOPPING"},
		examples: []string{"throttled run --config /etc/throttled/throttled.hcl --log-json"}},
	"signals": {about: "Samples the primary's and the replicas' health and prints every signal, its value, age and unit, or why it is unsafe. Exits 3 when a signal failed or is stale.",
		env:      append(dsnEnv, "THROTTLED_PGBOUNCER_DSN  PgBouncer's admin console, when --pgbouncer-dsn is not given"),
		examples: []string{"throttled signals --cores 8", "throttled signals --cores 8 --watch --custom 'queue_depth=SELECT count(*) FROM jobs_queue'"}},
	"exec": {about: "Runs one batch statement (with $1 for the batch size) under the throttle until it affects no row, with checkpoints, bounded retries and the cluster's holds.",
		env: append(dsnEnv, "THROTTLED_JOB_DSN  the connection string the statement runs on (default: the primary's)", "THROTTLED_PGBOUNCER_DSN  PgBouncer's admin console"),
		examples: []string{`throttled exec --cores 8 --job purge_sessions --sql "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE expires_at < now() - interval '30 days' LIMIT $1)"`,
			`throttled exec --cores 8 --job purge_sessions --table public.sessions --pause-on-vacuum --json --sql "..."`}},
	"pause": {about: "Places a hold: the jobs in its scope stop, in every process, including ones started later, until it expires or is released. Audited.",
		env: holdsEnv, examples: []string{`throttled pause --job purge_sessions --ttl 30m --reason "replica rebuild"`}},
	"throttle": {about: "Places a live override: a hold that runs the jobs in its scope at --ratio of their rate instead of stopping them. Audited; a running exec follows it at its next heartbeat.",
		env: holdsEnv, examples: []string{`throttled throttle --job purge_sessions --ratio 0.3 --ttl 2h --reason "deploy"`}},
	"resume": {synopsis: "(--hold ID | --job NAME | --prefix PREFIX | --scope SCOPE | --all [--yes] | --latched) [flags]", about: resumeUsage,
		env: holdsEnv, examples: []string{"throttled resume --job purge_sessions", `throttled resume --latched --reason "load gone, checked"`}},
	"holds":        {about: "Lists the active holds: scope, what each does (pause or a ratio), source, actor, time left and reason.", env: holdsEnv, examples: []string{"throttled holds --json"}},
	"status":       {about: "The cluster's leader, mode, budget and every worker, with each job's state and reason code.", env: dsnEnv, examples: []string{"throttled status"}},
	"audit":        {about: "The audit log: holds, releases, resumes, mode changes, settings, windows and pauses not honoured, with who and why.", env: holdsEnv, examples: []string{"throttled audit --since 24h"}},
	"check-config": {about: "Validates a configuration file with exactly the checks run makes before it connects: without --secrets it needs none (a lint for CI); --live also checks the cluster. Exits 4 for an invalid file.", env: []string{"the variables the file's env() calls name (with --secrets or --live)"}, examples: []string{"throttled check-config --config throttled.hcl", "throttled check-config --config throttled.hcl --live"}},
	"migrate":      {about: "Creates or updates throttled's tables (schema throttled), under an advisory lock; run it once per database, as a role that may create the schema.", examples: []string{"throttled migrate --dsn postgres://admin@db/app"}},
	"demo":         {about: "Starts a throwaway primary and replica and runs a real cleanup job against them while faults come and go (about 80 s).", examples: []string{"throttled demo --plots out/plots"}},
	"sim":          {about: "Compares pacing policies on simulated scenarios: the controller, unchanged, against a modelled primary and replica.", examples: []string{"throttled sim --scenario all --markdown"}},
	"bench":        {about: "throttled bench replay: foreground latency and cleanup throughput per pacing policy on a throwaway pair (about 45 minutes).", examples: []string{"throttled bench replay --out out/replay --doc docs/BENCHMARKS.md"}},
}

var quotedPhrase = regexp.MustCompile("`([^`]* [^`]*)`")

const exitCodesHelp = "Exit codes: 0 ok, 1 runtime failure, 2 usage, 3 unsafe or stale (signals), 4 invalid configuration."

// setUsage gives fs the usage -h prints: what the command does, its
// flags, the environment it reads, examples and the exit codes.
// A backquoted phrase of more than one word in a flag's text is shown in
// quotes: the flag package takes the first backquoted text for the
// argument's name, which is meant for one word such as `ID`.
func setUsage(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) { f.Usage = quotedPhrase.ReplaceAllString(f.Usage, "'$1'") })
	fs.Usage = func() {
		w := fs.Output()
		h := helps[fs.Name()]
		synopsis := h.synopsis
		if synopsis == "" {
			synopsis = "[flags]"
		}
		fmt.Fprintf(w, "Usage: throttled %s %s\n\n", fs.Name(), synopsis)
		if h.about != "" {
			fmt.Fprintf(w, "%s\n\n", h.about)
		}
		fmt.Fprintln(w, "Flags:")
		fs.PrintDefaults()
		if len(h.env) > 0 {
			fmt.Fprintln(w, "\nEnvironment:")
			for _, e := range h.env {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
		if len(h.examples) > 0 {
			fmt.Fprintln(w, "\nExamples:")
			for _, e := range h.examples {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
		fmt.Fprintf(w, "\n%s\n", exitCodesHelp)
	}
}

// buildInfo is `throttled version`'s answer.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(devel)"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// runVersion prints the build: throttled's version, the commit and the Go
// it was built with; --json as one object.
func runVersion(_ context.Context, args []string, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the build information as one JSON object")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "version", err)
	}
	b := readBuildInfo()
	if *asJSON {
		_ = json.NewEncoder(out).Encode(b)
		return exitOK
	}
	line := "throttled " + b.Version
	if b.Revision != "" {
		line += " (" + b.Revision
		if b.Modified {
			line += ", modified"
		}
		line += ")"
	}
	fmt.Fprintf(out, "%s, %s\n", line, b.GoVersion)
	return exitOK
}
