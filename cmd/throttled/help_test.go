package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// Every command answers `throttled help <command>` with what it does, its
// flags, the exit codes and, where it has them, examples; the flags' text
// keeps its quotes (a backquoted word is not taken for an argument name).
func TestHelpForEveryCommand(t *testing.T) {
	for _, c := range commands() {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"help", c.name}, &out, &errOut)
		text := out.String()
		if c.name == "bench" {
			continue // bench takes a subcommand; its replay has the flags
		}
		if code != exitOK || !strings.HasPrefix(text, "Usage: throttled "+c.name) || !strings.Contains(text, "Exit codes: 0 ok") {
			t.Errorf("help %s: exit %d\n%s%s", c.name, code, text, errOut.String())
			continue
		}
		if h, ok := helps[c.name]; ok && !strings.Contains(text, h.about) {
			t.Errorf("help %s lacks its description", c.name)
		} else if !ok && c.name != "version" {
			t.Errorf("command %s has no help text in helps", c.name)
		}
	}
	var out bytes.Buffer
	run(context.Background(), []string{"signals", "-h"}, &out, &out)
	if strings.Contains(out.String(), "-foreground-latency throttled migrate") || !strings.Contains(out.String(), "'throttled migrate'") {
		t.Errorf("signals -h turned a quoted command into the argument's name:\n%s", out.String())
	}
	out.Reset()
	run(context.Background(), []string{"resume", "-h"}, &out, &out)
	if !strings.Contains(out.String(), "-hold ID") {
		t.Errorf("resume -h lost the argument's name ID:\n%s", out.String())
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &out); code != exitOK || !strings.HasPrefix(out.String(), "throttled ") || !strings.Contains(out.String(), "go1.") {
		t.Errorf("--version: %d %q", code, out.String())
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
