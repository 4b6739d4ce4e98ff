package main

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/throttle/hold"
)

// noHolds opens a DB on the package's pair, releases every active hold
// (before and after the test) and returns the DB and the admin DSN.
func noHolds(t *testing.T) (*holds.DB, string) {
	t.Helper()
	c := pgtest.Cluster(t)
	ctx := context.Background()
	dsn := c.Primary.DSN(pgcluster.RoleAdmin)
	db, err := openDB(ctx, dsn, holds.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pool := db.Pool()
	release := func() {
		if _, err := pool.Exec(context.Background(), "UPDATE throttled.holds SET released_at = now(), released_by = 'test' WHERE released_at IS NULL"); err != nil {
			t.Error(err)
		}
	}
	release()
	t.Cleanup(func() { release(); pool.Close() })
	return db, dsn
}

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Issue 33, points 1 and 6, at the CLI's door: a --reason or an --actor
// that would forge a row of throttled holds or of the audit log, a --ratio
// too small to start a batch and a --ttl under a second are usage errors
// (exit 2) that name the flag and the problem, on a real cluster where
// each was accepted (or, 1ns, failed with exit 1 and the database's check
// constraint), and nothing is held.
func TestHoldCommandsRefuseForgingTextAndOutOfBoundsAtTheDoor(t *testing.T) {
	db, dsn := noHolds(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "--all", "--ttl", "2m", "--reason", "deploy\nh99  all  pause  manual  token:admin  23h59m0s  FORGED LINE"},
			"--reason: control character U+000A at byte 6; reasons and actors are one printable line"},
		{[]string{"pause", "--job", "archive", "--reason", "x", "--actor", "mallory\n2026-12-05T23:40:00Z  hold_released  h9  token:ops  manual  all clear"},
			"--actor: control character U+000A at byte 7"},
		{[]string{"pause", "--job", "archive", "--reason", "\x1b[2K\r\x1b[1A\x1b[2Kansi \x1b[31mRED\x1b[0m \x1b]0;title\a"}, "--reason: control character U+001B at byte 0"},
		{[]string{"throttle", "--job", "archive", "--ratio", "0.5", "--reason", "rlo \u202eenil"}, "--reason: bidirectional control U+202E at byte 4"},
		{[]string{"exempt", "--job", "archive", "--signal", "replica_lag_seconds", "--reason", "ls\u2028x"}, "--reason: line separator U+2028 at byte 2"},
		{[]string{"resume", "--job", "archive", "--reason", "done\nh1  all  FORGED"}, "--reason: control character U+000A at byte 4"},
		{[]string{"resume", "--job", "archive", "--actor", "bob\r"}, "--actor: control character U+000D at byte 3"},
		{[]string{"throttle", "--job", "archive", "--ratio", "1e-320", "--reason", "x"}, "--ratio must be from 0.001 (a thousandth of the jobs' rate) to 1, got 1e-320 (to stop the jobs, throttled pause)"},
		{[]string{"throttle", "--job", "archive", "--ratio", "5e-324", "--reason", "x"}, "--ratio must be from 0.001"},
		{[]string{"pause", "--job", "archive", "--ttl", "1ns", "--reason", "x"}, "--ttl 1ns is under the shortest hold, 1s"},
		{[]string{"pause", "--job", "archive", "--ttl", "999us", "--reason", "x"}, "--ttl 999µs is under the shortest hold, 1s"},
	} {
		code, out, errOut := runCLI(append(tc.args, "--primary-dsn", dsn)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, %s%s; want exit 2 saying %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if ids := activeIDs(t, db); len(ids) != 0 {
		t.Errorf("holds placed by refused commands: %v", ids)
	}
}

// Issue 33, point 1, on print: rows stored before the door existed (or
// written by any client of the database) must not forge a line either.
// throttled holds, audit and status print every stored text through one
// escaping: a newline is \n, ESC \x1b, U+202E \u202e, each row one line.
func TestHoldsAuditAndStatusPrintStoredTextOnOneLine(t *testing.T) {
	_, dsn := noHolds(t)
	admin := pgtest.Connect(t, pgtest.Cluster(t).Primary, pgcluster.RoleAdmin)
	ctx := context.Background()
	forgedHold := "deploy\nh99  all  pause  manual  token:admin  23h59m0s  FORGED LINE"
	forgedActor := "mallory\n2026-12-05T23:40:00Z  hold_released  h9  token:ops  manual  all clear"
	ansi := "\x1b[2K\r\x1b[1A\x1b[2Kansi \x1b[31mRED\x1b[0m \x1b]0;title\a"
	if _, err := admin.Exec(ctx, `INSERT INTO throttled.holds (scope_kind, scope_value, source, reason, actor, expires_at)
		VALUES ('job', 'archive', 'cli', $1, $2, now() + interval '10 minutes')`, forgedHold, "eve\u202e"+ansi); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `INSERT INTO throttled.audit (event, actor, source, reason) VALUES ('hold_released', $1, 'cli', $2)`, forgedActor, ansi); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `INSERT INTO throttled.leader (id, leader, budget, mode, reason) VALUES (1, 'hostile-test', 1, 'normal', $1)
		ON CONFLICT (id) DO UPDATE SET leader = EXCLUDED.leader, reason = EXCLUDED.reason, published_at = now()`, "held by "+forgedHold); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `INSERT INTO throttled.workers (id, job, state, reason) VALUES ('hostile-test/1', 'archive', 'paused', $1)`, "held: "+forgedHold+ansi); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DELETE FROM throttled.workers WHERE id = 'hostile-test/1'")
		admin.Exec(context.Background(), "DELETE FROM throttled.leader WHERE leader = 'hostile-test'")
	})
	for _, tc := range []struct {
		args  []string
		lines int    // at most
		shows string // the escaped text
	}{
		{[]string{"holds"}, 2, `deploy\nh99  all  pause`},
		{[]string{"audit", "--since", "1h"}, 0, `mallory\n2026-12-05T23:40:00Z  hold_released`},
		{[]string{"status"}, 0, `held: deploy\nh99  all  pause`},
	} {
		code, out, errOut := runCLI(append(tc.args, "--primary-dsn", dsn)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		if !strings.Contains(out, tc.shows) {
			t.Errorf("%v does not show %q escaped:\n%s", tc.args, tc.shows, out)
		}
		for _, line := range strings.Split(out, "\n") {
			for _, forged := range []string{"h99", "2026-12-05T23:40:00Z", "FORGED"} {
				if strings.HasPrefix(strings.TrimSpace(line), forged) {
					t.Errorf("%v prints a forged line %q:\n%s", tc.args, line, out)
				}
			}
		}
		if i := strings.IndexAny(out, "\x1b\r\a\u202e\u2028"); i >= 0 {
			t.Errorf("%v prints a raw control character at byte %d: %q", tc.args, i, out)
		}
		if tc.lines > 0 && strings.Count(out, "\n") != tc.lines {
			t.Errorf("%v: %d lines; want %d (a header and the one hold):\n%s", tc.args, strings.Count(out, "\n"), tc.lines, out)
		}
	}
}

// Issue 33, point 7, through the CLI: exempt --signal no_such_signal was
// accepted and did nothing; now it is a usage error naming the signals
// there are, on the database path and through a sidecar. A hold on
// job:nosuchjob is placed (exit 0) with a warning on standard error.
func TestExemptUnknownSignalAndHoldOnUnknownJobThroughTheCLI(t *testing.T) {
	db, dsn := noHolds(t)
	ctx := context.Background()
	client, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: pgtest.Cluster(t).Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: dsn, Coordinate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv, err := sidecar.New(client, &config.Config{Version: "v1", MaxConcurrent: 8, HoldTTL: hold.TTLPolicy{Default: time.Hour, Max: 24 * time.Hour},
		Tokens: []config.Token{{Name: "ops", Secret: opsToken, Scopes: []config.Scope{config.ScopePause, config.ScopeRead}}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hsrv := httptest.NewServer(srv.Handler())
	t.Cleanup(hsrv.Close)
	t.Setenv("THROTTLED_TOKEN", opsToken)
	for _, where := range [][]string{{"--primary-dsn", dsn}, {"--addr", hsrv.URL}} {
		code, out, errOut := runCLI(append([]string{"exempt", "--job", "archive", "--signal", "no_such_signal", "--reason", "x"}, where...)...)
		if code != exitUsage || !strings.Contains(errOut, `exempt "no_such_signal": no such signal`) || !strings.Contains(errOut, "replica_lag_seconds") {
			t.Errorf("exempt no_such_signal %v: exit %d, %s%s; want exit 2 naming the signals", where[0], code, out, errOut)
		}
		code, out, errOut = runCLI(append([]string{"exempt", "--job", "archive", "--signal", "replica_lag_seconds", "--ttl", "5m", "--reason", "x"}, where...)...)
		if code != exitOK {
			t.Errorf("exempt replica_lag_seconds %v: exit %d, %s%s", where[0], code, out, errOut)
		}
		code, out, errOut = runCLI(append([]string{"pause", "--job", "nosuchjob", "--ttl", "5m", "--reason", "x"}, where...)...)
		if code != exitOK || !strings.Contains(errOut, `throttled pause: warning: no process has registered job "nosuchjob"`) || !strings.Contains(out, "hold h") {
			t.Errorf("pause nosuchjob %v: exit %d, %s%s; want exit 0 and a warning", where[0], code, out, errOut)
		}
		code, _, errOut = runCLI(append([]string{"pause", "--all", "--ttl", "5m", "--reason", "x"}, where...)...)
		if code != exitOK || strings.Contains(errOut, "warning") {
			t.Errorf("pause --all %v: exit %d, %s; want no warning", where[0], code, errOut)
		}
	}
	if n := len(activeIDs(t, db)); n != 6 {
		t.Errorf("%d holds active; want the 6 accepted", n)
	}
}

// An error's text reaches the terminal escaped, line by line: an escape
// sequence in a database's error or a stored text cannot erase a line or
// set the terminal's title.
func TestFailEscapesControlCharacters(t *testing.T) {
	var errOut bytes.Buffer
	code := fail(&errOut, "status", errors.New("relation \"x\x1b[2K\r\x1b]0;title\a\" does not exist\nsecond line"))
	got := errOut.String()
	if code != exitError || strings.ContainsAny(got, "\x1b\r\a") {
		t.Errorf("exit %d, %q; want every control character escaped", code, got)
	}
	if want := "throttled status: relation \"x\\x1b[2K\\r\\x1b]0;title\\a\" does not exist\n  second line\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
