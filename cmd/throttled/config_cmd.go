package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/throttled/throttled/config"
)

func newCheckConfigCmd(lf *logFlags) *cobra.Command {
	var o checkConfigOptions
	cmd := &cobra.Command{
		Use:   "check-config --config FILE [flags]",
		Short: "validate a configuration file, offline or (--live) against the cluster",
		Long: `Validates a configuration file with exactly the checks run makes before it connects: without --secrets
it needs none (a lint for CI); --live also checks the cluster.`,
		Example: "  throttled check-config --config throttled.hcl\n  throttled check-config --config throttled.hcl --live --json",
		Args:    cobra.NoArgs,
		Annotations: map[string]string{
			annotationEnv:  "(the file's env() calls)  the variables they name (with --secrets or --live)",
			annotationExit: "Exit codes: 0 valid, 1 runtime failure (the cluster unreachable or not as the file says, with --live), 2 usage, 4 invalid configuration.",
		},
		RunE: action(func(cmd *cobra.Command) int {
			if _, err := applyEnv(cmd.Flags(), os.Getenv); err != nil {
				return fail(cmd.ErrOrStderr(), "check-config", err)
			}
			if _, err := lf.logger(cmd.ErrOrStderr()); err != nil {
				return fail(cmd.ErrOrStderr(), "check-config", err)
			}
			return checkConfig(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	configFlag(fs, &o.path)
	fs.BoolVar(&o.secrets, "secrets", false, "also check that every secret is there: each env() variable set, each *_file readable, and their contents (a DSN that parses, a token's length)")
	fs.BoolVar(&o.live, "live", false, "also check against the cluster, as run does before it starts (implies --secrets): the primary is one, every configured replica exists, every replica DSN reaches that replica, every custom signal's query runs")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "with --live, bound on the checks against the cluster")
	fs.BoolVar(&o.json, "json", false, "print the verdict as one JSON object (an invalid file too, with its error)")
	return cmd
}

// checkConfigOptions are the flags of `throttled check-config`.
type checkConfigOptions struct {
	path          string
	secrets, live bool
	timeout       time.Duration
	json          bool
}

// checkConfigResult is `throttled check-config --json`'s answer.
type checkConfigResult struct {
	File      string   `json:"file"`
	Valid     bool     `json:"valid"`
	Checked   string   `json:"checked"` // offline, with the secrets, or against the cluster too
	Error     string   `json:"error,omitempty"`
	Version   string   `json:"version,omitempty"`
	Cores     float64  `json:"cores,omitempty"`
	Replicas  []string `json:"replicas,omitempty"`
	Jobs      []string `json:"jobs,omitempty"`
	Tokens    int      `json:"tokens"`
	Notifiers int      `json:"notifiers"`
	Listen    string   `json:"listen,omitempty"`
	// Warnings are what --live found that does not keep run from
	// starting (a Prometheus signal whose rule is not required, unread).
	Warnings []string `json:"warnings,omitempty"`
}

func checkConfig(ctx context.Context, o checkConfigOptions, out, errOut io.Writer) int {
	path := o.path
	if path == "" {
		return fail(errOut, "check-config", usageError(errors.New("--config (or THROTTLED_CONFIG) is required")))
	}
	if o.timeout <= 0 {
		return fail(errOut, "check-config", usageError(fmt.Errorf("--timeout must be positive, got %s", o.timeout)))
	}
	// Without --secrets, the lint CI runs where the secrets are not: every
	// check run makes of the file but the secrets' presence.
	load := func(_ context.Context, path string) (*config.Config, error) {
		c, err := config.LoadWithoutSecrets(path)
		if err != nil {
			return nil, err
		}
		return c, checkToRun(path, c)
	}
	how := "offline, secrets not read"
	switch {
	case o.live:
		load, how = loadToRun, "offline, with its secrets, and against the cluster"
	case o.secrets:
		load, how = func(_ context.Context, path string) (*config.Config, error) {
			c, err := config.Load(path)
			if err != nil {
				return nil, err
			}
			return c, checkToRun(path, c)
		}, "offline, with its secrets"
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := load(ctx, path)
	res := checkConfigResult{File: path, Checked: how}
	if err != nil {
		if o.json {
			res.Error = err.Error()
			_ = json.NewEncoder(out).Encode(res)
		}
		return fail(errOut, "check-config", err)
	}
	var replicas []string
	for _, name := range slices.Sorted(maps.Keys(c.Replicas)) {
		replicas = append(replicas, name+" ("+string(c.Replicas[name])+")")
	}
	var jobNames []string
	for _, j := range c.Jobs {
		jobNames = append(jobNames, j.Name)
	}
	if o.json {
		res.Valid, res.Version, res.Cores, res.Replicas, res.Jobs = true, c.Version, c.Cores, replicas, jobNames
		res.Tokens, res.Notifiers, res.Listen, res.Warnings = len(c.Tokens), len(c.Notifiers), c.Listen, c.LiveWarnings
		_ = json.NewEncoder(out).Encode(res)
		return exitOK
	}
	fmt.Fprintf(out, "%s: valid (%s), version %s\n  cores %v; replicas: %s; jobs: %s; %d tokens; %d notifiers; listen %s\n",
		path, how, c.Version, c.Cores, orNone(replicas), orNone(jobNames), len(c.Tokens), len(c.Notifiers), orNone([]string{c.Listen}))
	for _, w := range c.LiveWarnings {
		fmt.Fprintf(out, "  warning: %s\n", w)
	}
	return exitOK
}

// checkToRun is every check run makes of a loaded file beyond its own
// validation, before it connects anywhere: check-config makes the same,
// through this function, so the two never disagree.
func checkToRun(path string, c *config.Config) error {
	if c.Listen == "" {
		return &config.InvalidError{Err: fmt.Errorf("config: %s: a listen block is required to run", path)}
	}
	return nil
}

// loadToRun loads the file at path and makes every check of a
// configuration that run makes, at start and on reload, before it uses
// one: the offline validation with every secret, checkToRun, and the
// checks against the cluster. check-config --live makes exactly these.
func loadToRun(ctx context.Context, path string) (*config.Config, error) {
	c, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	if err := checkToRun(path, c); err != nil {
		return nil, err
	}
	// Never start against a cluster the file does not describe.
	if err := c.Live(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func orNone(s []string) string {
	if len(s) == 0 || (len(s) == 1 && s[0] == "") {
		return "none"
	}
	return strings.Join(s, ", ")
}
