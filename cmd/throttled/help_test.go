package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// commandsOf is every command under c that a person may run, nested
// ones (bench replay) included.
func commandsOf(c *cobra.Command) []*cobra.Command {
	var all []*cobra.Command
	for _, sub := range c.Commands() {
		if !sub.IsAvailableCommand() {
			continue
		}
		all = append(all, sub)
		all = append(all, commandsOf(sub)...)
	}
	return all
}

// Every command answers `throttled help <command>` with its usage line,
// what it does, its flags, the environment it reads, the exit codes and,
// where it has them, examples; a flag's text keeps its quotes.
func TestHelpForEveryCommand(t *testing.T) {
	cmds := commandsOf(newRootCmd(io.Discard, io.Discard))
	names := map[string]bool{}
	for _, c := range cmds {
		names[commandName(c)] = true
	}
	want := []string{"run", "signals", "exec", "migrate", "pause", "throttle", "resume", "holds", "status",
		"audit", "check-config", "version", "completion", "completion bash"}
	if labBuild {
		want = append(want, "demo", "sim", "bench", "bench replay")
	}
	for _, want := range want {
		if !names[want] {
			t.Errorf("no command %q", want)
		}
	}
	for _, c := range cmds {
		name := commandName(c)
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"help"}, strings.Fields(name)...), &out, &errOut)
		text := out.String()
		if code != exitOK || !strings.HasPrefix(text, "Usage: throttled "+name) || !strings.Contains(text, "\nExit codes: 0 ") ||
			!strings.Contains(text, "\nEnvironment:\n") {
			t.Errorf("help %s: exit %d\n%s%s", name, code, text, errOut.String())
			continue
		}
		if c.Long == "" || !strings.Contains(text, c.Long) {
			t.Errorf("help %s lacks its description", name)
		}
		if !strings.HasPrefix(name, "completion") && !strings.Contains(text, "\nExamples:\n  throttled "+name) {
			t.Errorf("help %s lacks its examples:\n%s", name, text)
		}
		// The same text, by --help.
		var viaFlag bytes.Buffer
		if code := run(context.Background(), append(strings.Fields(name), "--help"), &viaFlag, &viaFlag); code != exitOK || viaFlag.String() != text {
			t.Errorf("%s --help: exit %d, differs from help %s:\n%s", name, code, name, viaFlag.String())
		}
	}
	var out bytes.Buffer
	run(context.Background(), []string{"signals", "-h"}, &out, &out)
	if !strings.Contains(out.String(), "'throttled migrate'") || !strings.Contains(out.String(), "THROTTLED_CORES          --cores") {
		t.Errorf("signals -h:\n%s", out.String())
	}
	out.Reset()
	run(context.Background(), []string{"resume", "-h"}, &out, &out)
	if !strings.Contains(out.String(), "--hold ID") || !strings.Contains(out.String(), "THROTTLED_ADDR") || !strings.Contains(out.String(), "THROTTLED_TOKEN") {
		t.Errorf("resume -h lost the argument's name ID or its environment:\n%s", out.String())
	}
	out.Reset()
	run(context.Background(), []string{"help", "run"}, &out, &out)
	if !strings.Contains(out.String(), "THROTTLED_CONFIG         --config") || !strings.Contains(out.String(), "beats the configuration file") {
		t.Errorf("help run lacks --config's variable or the precedence:\n%s", out.String())
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &out); code != exitOK || !strings.HasPrefix(out.String(), "throttled ") || !strings.Contains(out.String(), "go1.") {
		t.Errorf("--version: %d %q", code, out.String())
	}
	line := out.String()
	out.Reset()
	if code := run(context.Background(), []string{"version"}, &out, &out); code != exitOK || out.String() != line {
		t.Errorf("version: %d %q; want --version's %q", code, out.String(), line)
	}
	out.Reset()
	if code := run(context.Background(), []string{"version", "--json"}, &out, &out); code != exitOK {
		t.Fatalf("version --json: %d %s", code, out.String())
	}
	var b buildInfo
	if err := json.Unmarshal(out.Bytes(), &b); err != nil || b.Version == "" || !strings.HasPrefix(b.GoVersion, "go1.") {
		t.Errorf("version --json = %s (%v)", out.String(), err)
	}
}

// A usage error is one line on standard error naming the flag and the
// value, with exit code 2: not the usage text, not Go's names.
func TestUsageErrors(t *testing.T) {
	type usage struct {
		args []string
		want string
	}
	lab := []usage{
		{[]string{"bench", "replay", "--rows", "1.5"}, `throttled bench replay: --rows "1.5": want a whole number (see`},
		{[]string{"sim", "extra"}, `throttled sim: unknown command "extra" for "throttled sim" (see`},
	}
	if !labBuild {
		lab = []usage{
			{[]string{"bench", "replay", "--rows", "1.5"}, `throttled bench: not in this production binary`},
			{[]string{"sim", "extra"}, `throttled sim: not in this production binary`},
		}
	}
	for _, tc := range append(lab, []usage{
		{[]string{"signals", "--cores", "two"}, `throttled signals: --cores "two": want a number (see ` + "`throttled signals --help`)"},
		{[]string{"holds", "--nope"}, "throttled holds: unknown flag --nope (see"},
		{[]string{"audit", "--since"}, "throttled audit: --since needs a value (see"},
		{[]string{"status", "--timeout", "soon"}, `throttled status: --timeout "soon": want a duration such as 500ms, 30s or 2h (see`},
		{[]string{"version", "--json=maybe"}, `throttled version: --json "maybe": want true or false (see`},
		{[]string{"frobnicate"}, `throttled: unknown command "frobnicate" for "throttled" (see ` + "`throttled --help`)"},
	}...) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut)
		got := errOut.String()
		if code != exitUsage || !strings.HasPrefix(got, tc.want) || strings.Count(got, "\n") != 1 || out.Len() != 0 || strings.Contains(got, "invalid usage") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want one line starting %q", tc.args, code, out.String(), got, tc.want)
		}
	}
}

// A variable stands in for a flag not given; a flag given wins; a bad
// variable is a usage error that names it.
func TestEnvironmentBehindFlags(t *testing.T) {
	env := map[string]string{"THROTTLED_PRIMARY_DSN": "postgres://env/db", "THROTTLED_CORES": "6"}
	getenv := func(k string) string { return env[k] }
	o, err := parseSignalsFlags(nil, getenv, &bytes.Buffer{})
	if err != nil || o.cfg.PrimaryDSN != "postgres://env/db" || o.cfg.Cores != 6 {
		t.Fatalf("from the environment: %v, %q, %v", err, o.cfg.PrimaryDSN, o.cfg.Cores)
	}
	o, err = parseSignalsFlags([]string{"--cores", "3", "--primary-dsn", "postgres://flag/db"}, getenv, &bytes.Buffer{})
	if err != nil || o.cfg.PrimaryDSN != "postgres://flag/db" || o.cfg.Cores != 3 {
		t.Fatalf("flags over the environment: %v, %q, %v", err, o.cfg.PrimaryDSN, o.cfg.Cores)
	}
	env["THROTTLED_CORES"] = "many"
	if _, err := parseExecFlags([]string{"--job", "j", "--sql", "DELETE FROM t LIMIT $1"}, getenv, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), `$THROTTLED_CORES "many": want a number`) {
		t.Fatalf("bad THROTTLED_CORES: %v", err)
	}
	// --primary-dsn given beats a sidecar named by THROTTLED_ADDR.
	// coordFlags as the holds command registers them, parsed by it.
	var cf coordFlags
	holdsCmd := &cobra.Command{Use: "holds", Args: cobra.NoArgs}
	cf.register(holdsCmd.Flags(), false, "")
	if err := parseWith(holdsCmd, &logFlags{}, []string{"--primary-dsn", "postgres://flag/db"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	fs := holdsCmd.Flags()
	env["THROTTLED_ADDR"], env["THROTTLED_TOKEN"] = "http://127.0.0.1:1", "t"
	if err := cf.resolve(fs, getenv); err != nil || cf.addr != "" || cf.dsn != "postgres://flag/db" {
		t.Fatalf("--primary-dsn with THROTTLED_ADDR set: %v, addr %q, dsn %q", err, cf.addr, cf.dsn)
	}
	cf = coordFlags{}
	holdsCmd = &cobra.Command{Use: "holds", Args: cobra.NoArgs}
	cf.register(holdsCmd.Flags(), false, "")
	fs = holdsCmd.Flags()
	if err := cf.resolve(fs, getenv); err != nil || cf.addr != "http://127.0.0.1:1" || cf.token != "t" {
		t.Fatalf("THROTTLED_ADDR alone: %v, addr %q", err, cf.addr)
	}
}

// The completion scripts generate for each shell and know the commands.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"completion", shell}, &out, &errOut); code != exitOK || out.Len() < 1000 {
			t.Fatalf("completion %s: exit %d, %d bytes: %s", shell, code, out.Len(), errOut.String())
		}
		if !strings.Contains(out.String(), "throttled") {
			t.Errorf("completion %s does not name the program", shell)
		}
	}
	// The scripts ask the binary (__complete); its answers are the commands
	// and a command's flags.
	var out bytes.Buffer
	run(context.Background(), []string{"__complete", ""}, &out, &bytes.Buffer{})
	for _, want := range []string{"signals\t", "exec\t", "pause\t", "check-config\t", "bench\t", "version\t"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("completing a command lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	run(context.Background(), []string{"__complete", "exec", "--"}, &out, &bytes.Buffer{})
	for _, want := range []string{"--primary-dsn\t", "--cores\t", "--timeout\t", "--log-level\t", "--json\t"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("completing exec's flags lacks %q:\n%s", want, out.String())
		}
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		var script bytes.Buffer
		run(context.Background(), []string{"completion", "bash"}, &script, &bytes.Buffer{})
		if msg, err := exec.Command(bash, "-n", "-c", script.String()).CombinedOutput(); err != nil {
			t.Errorf("bash -n on the completion script: %v: %s", err, msg)
		}
	}
}

// The manual pages generate, one per command, with the environment and
// exit codes, and man (or groff) reads them without a warning.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"man", "--dir", dir}, &out, &errOut); code != exitOK {
		t.Fatalf("man: exit %d: %s", code, errOut.String())
	}
	for _, name := range []string{"throttled.1", "throttled-signals.1", "throttled-bench-replay.1", "throttled-check-config.1"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("no page %s: %v", name, err)
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "throttled-signals.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".TH \"THROTTLED\" \"1\"", ".SH ENVIRONMENT", "THROTTLED_PRIMARY_DSN", ".SH EXIT STATUS", `\fB--cores\fP`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("throttled-signals.1 lacks %q", want)
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("no groff to read the pages with")
	}
	for _, name := range []string{"throttled.1", "throttled-signals.1", "throttled-exec.1"} {
		cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z", filepath.Join(dir, name))
		if msg, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(msg)) > 0 {
			t.Errorf("groff on %s: %v: %s", name, err, msg)
		}
	}
}
