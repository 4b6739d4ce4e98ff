package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The build (`throttled version`, `throttled --version`) and the manual
// pages (`throttled man`, run by `make man`).

// holdsEnv is what the commands on the cluster's holds and state read
// from the environment beyond their flags' (their annotationEnv).
const holdsEnv = "THROTTLED_TOKEN  the token for --addr"

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

// versionLine is the build in one line: throttled's version, the commit
// and the Go it was built with.
func versionLine(b buildInfo) string {
	line := "throttled " + b.Version
	if b.Revision != "" {
		line += " (" + b.Revision
		if b.Modified {
			line += ", modified"
		}
		line += ")"
	}
	return fmt.Sprintf("%s, %s", line, b.GoVersion)
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "the build: version, commit and Go (--json for an object)",
		Long:    "Prints the build: throttled's version, the commit it was built from (and whether the tree was modified) and the Go it was built with. `throttled --version` prints the same line.",
		Example: "  throttled version\n  throttled version --json",
		Args:    cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command) int {
			b := readBuildInfo()
			if asJSON {
				_ = json.NewEncoder(cmd.OutOrStdout()).Encode(b)
				return exitOK
			}
			fmt.Fprintln(cmd.OutOrStdout(), versionLine(b))
			return exitOK
		}),
		Annotations: map[string]string{annotationExit: "Exit codes: 0 ok, 2 usage."},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build information as one JSON object")
	return cmd
}

// newManCmd writes one manual page per command (section 1): what
// `make man` runs. Hidden: it is for packagers, not for everyday use.
func newManCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "man",
		Short:  "write the manual pages, one per command, into --dir",
		Long:   "Writes the manual pages (section 1, roff), one per command: throttled.1, throttled-signals.1 and so on, with each command's description, flags, environment, examples and exit codes.",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command) int {
			if err := writeManPages(cmd.Root(), dir); err != nil {
				return fail(cmd.ErrOrStderr(), "man", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote the manual pages into %s\n", dir)
			return exitOK
		}),
	}
	cmd.Flags().StringVar(&dir, "dir", "out/man", "directory to write the pages into")
	return cmd
}

// writeManPages writes root's tree as manual pages into dir. Each page's
// description gains the ENVIRONMENT and EXIT STATUS sections the help
// prints, which cobra's generator does not know.
func writeManPages(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		if c.Long == "" {
			c.Long = c.Short
		}
		// The sections are Markdown, which cobra turns into roff.
		env := strings.ReplaceAll(environmentHelp(c), "\n", "\n\n")
		c.Long += "\n\n# ENVIRONMENT\n\n" + strings.TrimSpace(env) + "\n\n# EXIT STATUS\n\n" + exitHelpOf(c) + "\n"
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				visit(sub)
			}
		}
	}
	visit(root)
	header := &doc.GenManHeader{Title: "THROTTLED", Section: "1", Source: versionLine(readBuildInfo()), Manual: "throttled manual"}
	if t, err := time.Parse(time.RFC3339, readBuildInfo().Time); err == nil {
		header.Date = &t // reproducible: the commit's time, not now
	}
	root.DisableAutoGenTag = true
	return doc.GenManTree(root, header, dir)
}

// exitHelpOf is c's exit codes line.
func exitHelpOf(c *cobra.Command) string {
	for ; c != nil; c = c.Parent() {
		if e, ok := c.Annotations[annotationExit]; ok {
			return e
		}
	}
	return exitCodesHelp
}
