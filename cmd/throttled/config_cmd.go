package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/throttled/throttled/config"
)

func runCheckConfig(ctx context.Context, args []string, out, errOut io.Writer) int {
	var path string
	var secrets, live bool
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.StringVar(&path, "config", "", "the configuration file (required)")
	fs.BoolVar(&secrets, "secrets", false, "also check that every secret is there: each env() variable set, each *_file readable, and their contents (a DSN that parses, a token's length)")
	fs.BoolVar(&live, "live", false, "also check against the cluster, as run does before it starts (implies --secrets): the primary is one, every configured replica exists, every replica DSN reaches that replica, every custom signal's query runs")
	if err := parse(fs, args, errOut); err != nil {
		return fail(errOut, "check-config", err)
	}
	if path == "" {
		return fail(errOut, "check-config", fmt.Errorf("%w: --config is required", errUsage))
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
	case live:
		load, how = loadToRun, "offline, with its secrets, and against the cluster"
	case secrets:
		load, how = func(_ context.Context, path string) (*config.Config, error) {
			c, err := config.Load(path)
			if err != nil {
				return nil, err
			}
			return c, checkToRun(path, c)
		}, "offline, with its secrets"
	}
	c, err := load(ctx, path)
	if err != nil {
		return fail(errOut, "check-config", err)
	}
	var replicas []string
	for name, p := range c.Replicas {
		replicas = append(replicas, name+" ("+string(p)+")")
	}
	var jobNames []string
	for _, j := range c.Jobs {
		jobNames = append(jobNames, j.Name)
	}
	fmt.Fprintf(out, "%s: valid (%s), version %s\n  cores %v; replicas: %s; jobs: %s; %d tokens; %d notifiers; listen %s\n",
		path, how, c.Version, c.Cores, orNone(replicas), orNone(jobNames), len(c.Tokens), len(c.Notifiers), orNone([]string{c.Listen}))
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
