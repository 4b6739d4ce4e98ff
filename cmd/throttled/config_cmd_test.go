package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// runGetsPastConfig starts `throttled run` on path and reports whether it
// got past its checks of the configuration (it serves), or else the error
// it refused the file with, without its "throttled run: " prefix.
func runGetsPastConfig(t *testing.T, path string) (serving bool, refusal string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut pgtest.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"run", "--config", path, "--log-level", "error"}, &out, &errOut) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for !strings.Contains(out.String(), "throttled: serving on") {
		select {
		case code := <-done:
			if code == exitOK {
				t.Fatalf("run ended without serving: %s", out.String())
			}
			return false, strings.TrimPrefix(errOut.String(), "throttled run: ")
		case <-tick.C:
		case <-deadline:
			t.Fatalf("run neither served nor refused within 60 s: %s %s", out.String(), errOut.String())
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("run exit %d after serving: %s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop within 20 s")
	}
	return true, ""
}

// check-config --live used to say "valid" for files run refuses: a
// replica DSN that reaches nothing or the primary (never connected to), a
// port out of range (never parsed), a missing listen block (not looked
// for); and both accepted a duplicate signal block. check-config --live and
// run now make the same checks through one function, so over this corpus
// both accept, or both refuse with the same message.
func TestCheckConfigLiveAndRunAgree(t *testing.T) {
	c := pgtest.Cluster(t)
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	monitor := func(s *pgcluster.Server) string { return s.DSN(pgcluster.RoleMonitor) }
	src := func(replicaDSN, listen, extra string) string {
		dsn := ""
		if replicaDSN != "" {
			dsn = fmt.Sprintf("  dsn    = %q\n", replicaDSN)
		}
		return fmt.Sprintf(`primary {
  dsn              = %q
  coordination_dsn = %q
  cores            = 2
}
replica "replica1" {
  policy = "required"
%s}
%stoken "ops" {
  secret = env("THROTTLED_TEST_TOKEN_OPS")
  scopes = ["read", "pause", "admin"]
}
job "purge" {
  weight = 1
}
%s`, monitor(c.Primary), c.Primary.DSN(pgcluster.RoleAdmin), dsn, listen, extra)
	}
	listen := func(addr string) string { return fmt.Sprintf("listen {\n  address = %q\n}\n", addr) }
	dir := t.TempDir()
	for _, tc := range []struct {
		name, src string
		want      string // the refusal; "" when both accept
	}{
		{"good", src(monitor(c.Replica), listen(freeAddr(t)), ""), ""},
		{"replica dsn at the primary", src(monitor(c.Primary), listen(freeAddr(t)), ""),
			`replica "replica1": dsn: signals: wrong kind of server: a replica DSN points at`},
		{"replica dsn unreachable", src(fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", pgcluster.RoleMonitor, closedPort), listen(freeAddr(t)), ""),
			`replica "replica1": dsn: signals: server unreachable`},
		{"port out of range", src("", listen("127.0.0.1:99999"), ""),
			`listen: address = "127.0.0.1:99999": port "99999" is not a number from 1 to 65535`},
		{"no listen block", src("", "", ""), "a listen block is required to run"},
		{"duplicate signal", src("", listen(freeAddr(t)), "signal \"primary_load\" {\n  target = 0.5\n}\nsignal \"primary_load\" {\n  target = 0.6\n}\n"),
			`signal "primary_load" is configured twice`},
		{"coordination by the sampler's role", strings.Replace(src("", listen(freeAddr(t)), ""), c.Primary.DSN(pgcluster.RoleAdmin), monitor(c.Primary), 1),
			`primary: coordination_dsn: schema: role "throttled_monitor" may not create or change schema throttled (permission denied for database postgres)`},
		{"no coordination_dsn with a sampler's dsn", regexp.MustCompile(`(?m)^  coordination_dsn.*\n`).ReplaceAllString(src("", listen(freeAddr(t)), ""), ""),
			`primary: coordination_dsn (left out, so dsn: the sampler's pg_monitor role): schema: role "throttled_monitor" may not create or change schema throttled`},
		{"critical within the emergency cut", src("", listen(freeAddr(t)), "signal \"primary_load\" {\n  target = 0.8\n  critical = 1.0\n}\n"),
			`signal "primary_load": critical 1 is too close to target 0.8`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".hcl")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			code := run(context.Background(), []string{"check-config", "--config", path, "--live"}, &out, &errOut)
			checked := strings.TrimPrefix(errOut.String(), "throttled check-config: ")
			serving, refused := runGetsPastConfig(t, path)
			t.Logf("check-config --live: exit %d %s%s; run: serving %v %s", code, out.String(), errOut.String(), serving, refused)
			if tc.want == "" {
				if code != exitOK || !serving {
					t.Fatalf("a good file: check-config --live exit %d (%s), run serving %v (%s); want both to accept", code, checked, serving, refused)
				}
				return
			}
			if (code != exitError && code != exitConfig) || serving {
				t.Fatalf("check-config --live exit %d (%s), run serving %v (%s); want both to refuse", code, out.String()+checked, serving, refused)
			}
			if checked != refused {
				t.Fatalf("they refuse differently:\ncheck-config --live: %s\nrun:                 %s", checked, refused)
			}
			if !strings.Contains(checked, tc.want) || !strings.Contains(checked, path+":") {
				t.Fatalf("refusal %q lacks %q, or the file and line", checked, tc.want)
			}
			if strings.Contains(checked, c.Password(pgcluster.RoleMonitor)) {
				t.Fatal("the refusal shows the DSN's password")
			}
		})
	}
}
