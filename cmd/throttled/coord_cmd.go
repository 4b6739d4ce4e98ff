package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
)

// coordFlags are the flags every command on the cluster's holds and
// state takes: where to act (the database or a sidecar's API), as whom,
// how long to wait, and --json.
type coordFlags struct {
	dsn     string
	config  string // a sidecar's configuration file, for its coordination_dsn
	addr    string // a sidecar's API instead of the database
	token   string
	actor   string
	json    bool
	timeout time.Duration
}

func (c *coordFlags) register(fs *pflag.FlagSet, withActor bool, jsonHelp string) {
	fs.StringVar(&c.dsn, "primary-dsn", "", "the primary, as a role that may write schema throttled")
	withEnv(fs, "primary-dsn", "THROTTLED_PRIMARY_DSN")
	fs.StringVar(&c.addr, "addr", "", "a sidecar's URL, such as http://127.0.0.1:18087, to act through instead of the database (token in $THROTTLED_TOKEN; a --primary-dsn given beats this variable)")
	withEnv(fs, "addr", "THROTTLED_ADDR")
	fs.StringVar(&c.config, "config", "", "a sidecar's configuration file: act on its primary (coordination_dsn) when neither --primary-dsn nor --addr is given")
	withEnv(fs, "config", "THROTTLED_CONFIG")
	if withActor {
		fs.StringVar(&c.actor, "actor", "", "who is acting (default: the OS user; through --addr, the token's name)")
	}
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the call: connecting and every query, or the sidecar's answer")
	fs.BoolVar(&c.json, "json", false, jsonHelp)
}

// resolve reads the environment behind the flags not given (and the
// token), and checks that there is somewhere to act.
func (c *coordFlags) resolve(fs *pflag.FlagSet, getenv func(string) string) error {
	given, err := applyEnv(fs, getenv)
	if err != nil {
		return err
	}
	// A flag beats a variable: --primary-dsn on the command line acts on
	// the database even where $THROTTLED_ADDR names a sidecar.
	if given["primary-dsn"] && !given["addr"] {
		c.addr = ""
	}
	if c.timeout <= 0 {
		return usageError(fmt.Errorf("--timeout must be positive, got %s", c.timeout))
	}
	if c.addr != "" {
		if c.token = getenv("THROTTLED_TOKEN"); c.token == "" {
			return usageError(errors.New("--addr needs a token in THROTTLED_TOKEN"))
		}
		return nil
	}
	if c.dsn == "" && c.config != "" {
		dsn, err := configDSN(c.config)
		if err != nil {
			return err
		}
		c.dsn = dsn
	}
	if c.dsn == "" {
		return usageError(errors.New("--primary-dsn (or THROTTLED_PRIMARY_DSN), --addr (or THROTTLED_ADDR), or --config (or THROTTLED_CONFIG) is required"))
	}
	if err := checkDSN("--primary-dsn", c.dsn); err != nil {
		return usageError(err)
	}
	if c.actor == "" {
		c.actor = getenv("USER")
		if u, err := user.Current(); err == nil && u.Username != "" {
			c.actor = u.Username
		}
	}
	return nil
}

// configDSN is the coordination DSN of the configuration file at path,
// read as check-config reads it offline: only that secret must be there.
func configDSN(path string) (string, error) {
	cfg, err := config.LoadWithoutSecrets(path)
	if err != nil {
		return "", err
	}
	if what, unset := config.Unset(cfg.CoordinationDSN); unset {
		return "", usageError(fmt.Errorf("--config %s: the primary's coordination_dsn (or dsn) is %s, which is not set", path, what))
	}
	return cfg.CoordinationDSN, nil
}

// coordCmd builds one of the commands on the cluster's holds and state:
// its flags, its text, and a body that gets the resolved flags.
func coordCmd(lf *logFlags, c *cobra.Command, cf *coordFlags, withActor bool, jsonHelp string,
	body func(ctx context.Context, cmd *cobra.Command, out, errOut io.Writer) int) *cobra.Command {
	c.Args = cobra.NoArgs
	c.Annotations = map[string]string{annotationEnv: holdsEnv,
		annotationExit: "Exit codes: 0 ok, 1 runtime failure (the database or the sidecar unreachable or refusing), 2 usage (a hold past the cluster's cap included)."}
	c.RunE = action(func(cmd *cobra.Command) int {
		name := commandName(cmd)
		if err := cf.resolve(cmd.Flags(), os.Getenv); err != nil {
			return fail(cmd.ErrOrStderr(), name, err)
		}
		// Logs (pgx's, the sidecar client's) go to standard error, as
		// every command's; the level is checked like theirs.
		if _, err := lf.logger(cmd.ErrOrStderr()); err != nil {
			return fail(cmd.ErrOrStderr(), name, err)
		}
		return body(cmd.Context(), cmd, cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	c.Flags().SortFlags = false
	cf.register(c.Flags(), withActor, jsonHelp)
	return c
}

// commandName is cmd's name below the root, as errors name it.
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// openDB connects and migrates schema throttled, bounded by ctx. The
// caller closes the DB's pool.
func openDB(ctx context.Context, dsn string, cfg holds.Config) (*holds.DB, error) {
	return connectDB(ctx, dsn, cfg, holds.Migrate)
}

// openReadDB connects to read only: it checks that schema throttled is
// current and migrates nothing, so a role that may only read it
// (pg_monitor) will do. The caller closes the DB's pool.
func openReadDB(ctx context.Context, dsn string, cfg holds.Config) (*holds.DB, error) {
	return connectDB(ctx, dsn, cfg, holds.CheckSchema)
}

// connectDB connects to dsn and, once prepare (Migrate or CheckSchema)
// succeeds on the pool, returns a DB on it.
func connectDB(ctx context.Context, dsn string, cfg holds.Config, prepare func(context.Context, *pgxpool.Pool) error) (*holds.DB, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, usageError(fmt.Errorf("--primary-dsn: %w", err))
	}
	pcfg.MaxConns = 2
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pcfg.ConnConfig.RuntimeParams["application_name"] = "throttled-cli"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	db, err := holds.New(pool, cfg)
	if err == nil {
		err = prepare(ctx, pool)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}
