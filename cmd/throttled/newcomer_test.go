package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// transcript records what a newcomer typed and what each command printed,
// for docs/NEWCOMER.md.
type transcript struct {
	b strings.Builder
}

func (tr *transcript) step(title, note string) {
	fmt.Fprintf(&tr.b, "\n## %s\n\n%s\n", title, note)
}

func (tr *transcript) shown(cmd, out string, code int) {
	fmt.Fprintf(&tr.b, "\n```console\n$ %s\n%s\n```\n", cmd, strings.TrimRight(out, "\n"))
	if code != 0 {
		fmt.Fprintf(&tr.b, "\nExit code %d.\n", code)
	}
}

// runShown runs the CLI in process as `throttled args...` would, records
// the command line (as shown) and what it printed, and returns both.
func (tr *transcript) runShown(t *testing.T, shown string, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code := run(context.Background(), args, &out, &out)
	tr.shown(shown, out.String(), code)
	return out.String(), code
}

// The newcomer's path, as issue 14 asks it to be shown: the help, a lint
// of the shipped example with no secrets, the image, a freno-style HEAD
// check on a sidecar, and a live override on a running exec. Each step is
// checked; with THROTTLED_TRANSCRIPT=path (make transcript) the
// transcript is written there. The image step runs only then: the image
// itself is TestTheImageRunsTheSidecar's.
func TestNewcomerTranscript(t *testing.T) {
	c := pgtest.Cluster(t)
	tr := &transcript{}
	docPath := os.Getenv("THROTTLED_TRANSCRIPT")

	tr.step("1. What is there", "The help lists the commands, the environment variables and the exit codes.")
	out, code := tr.runShown(t, "throttled --help", "--help")
	for _, want := range []string{"exec", "check-config", "throttle", "run"} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Fatalf("--help: exit %d, no %q:\n%s", code, want, out)
		}
	}

	tr.step("2. Lint the example configuration, offline, with no secrets",
		"CI can run this: nothing is connected to and no secret needs to be present. `--secrets` also checks them; `--live` checks against the cluster.")
	for _, k := range []string{"THROTTLED_TOKEN_OPS", "THROTTLED_TOKEN_VIEWER", "THROTTLED_GRAFANA_SECRET", "THROTTLED_WEBHOOK_SECRET", "THROTTLED_PRIMARY_DSN", "THROTTLED_COORDINATION_DSN"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	example, err := filepath.Abs("../../examples/throttled.hcl")
	if err != nil {
		t.Fatal(err)
	}
	out, code = tr.runShown(t, "throttled check-config --config examples/throttled.hcl", "check-config", "--config", example)
	if code != exitOK {
		t.Fatalf("check-config on the example without secrets: exit %d\n%s", code, out)
	}

	if docPath != "" {
		tr.step("3. Build the image, and start it", "`make image` builds a static binary into an image FROM scratch, run as a non-root user.")
		const tag = "localhost/throttled:dev"
		build := exec.Command("../../scripts/build-image", tag)
		b, err := build.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		tr.shown("make image", "…\n"+strings.Join(lines[max(0, len(lines)-3):], "\n"), procExit(err))
		if err != nil {
			t.Fatalf("build-image: %v\n%s", err, b)
		}
		ver, err := podman("run", "--rm", tag, "version")
		tr.shown("podman run --rm "+tag+" version", ver, procExit(err))
		if err != nil && containsAny(ver, noContainers) {
			// This sandbox's crun may not set rlimits: runc, with rlimits
			// no higher than this process's, runs it (as the image test).
			fmt.Fprintf(&tr.b, "\nThis machine's crun may not set rlimits; with runc and rlimits no higher than the shell's:\n")
			ver, err = podman("run", "--rm", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", tag, "version")
			tr.shown("podman run --rm --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "+tag+" version", ver, procExit(err))
		}
		if err != nil && !containsAny(ver, noContainers) {
			t.Fatalf("podman run: %v\n%s", err, ver)
		}
		user, _ := podman("image", "inspect", "--format", "{{.Config.User}}", tag)
		tr.shown("podman image inspect --format '{{.Config.User}}' "+tag, user, 0)
	}

	tr.step("4. A sidecar, and a freno-style check",
		"With `open_checks = true` in the listen block, `/check/{job}` answers without a token and nothing else is opened: gh-ost's `--throttle-http` sends a plain HEAD and reads the status code only.")
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	addr := freeAddr(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "throttled.hcl")
	src := fmt.Sprintf(`primary {
  dsn              = %q
  coordination_dsn = %q
  cores            = 2
}
listen {
  address     = %q
  open_checks = true
}
token "ops" {
  secret = env("THROTTLED_TEST_TOKEN_OPS")
  scopes = ["read", "pause", "admin"]
}
job "purge" {}
`, c.Primary.DSN(pgcluster.RoleMonitor), c.Primary.DSN(pgcluster.RoleAdmin), addr)
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var sidecarOut pgtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", cfgPath, "--log-level", "warn"}, &sidecarOut, &sidecarOut)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	base := "http://" + addr
	waitReady(t, base, 30*time.Second)
	var head *http.Response
	pgtest.Eventually(t, 15*time.Second, func() error {
		r, err := http.Head(base + "/check/purge")
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("HEAD /check/purge: %d", r.StatusCode)
		}
		head = r
		return nil
	})
	tr.shown("curl -sI http://127.0.0.1:PORT/check/purge | head -1", "HTTP/1.1 "+head.Status, 0)
	r, err := http.Get(base + "/v1/holds")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	tr.shown("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:PORT/v1/holds", fmt.Sprint(r.StatusCode), 0)
	if r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("open_checks opened /v1/holds: %d", r.StatusCode)
	}

	tr.step("5. A live override on a running exec",
		"`throttled exec` runs a batch statement under the throttle and follows the cluster's holds at its next heartbeat. `throttled throttle --ratio` scales it without stopping it; `throttled resume` ends the override.")
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	oldNew(t, admin, "newcomer_events", 400_000)
	execCtx, stopExec := context.WithCancel(context.Background())
	var execOut, execErr pgtest.Buffer
	execDone := make(chan int, 1)
	execCmd := execArgs(c, "newcomer-events", "newcomer_events", "--json", "--max-rate", "8", "--initial-rate", "8",
		"--batch-size", "20", "--max-batch-size", "20")
	go func() { execDone <- run(execCtx, execCmd, &execOut, &execErr) }()
	t.Cleanup(func() {
		stopExec()
		<-execDone
	})
	lines := func() []execProgress {
		var ps []execProgress
		for _, l := range strings.Split(strings.TrimSpace(execOut.String()), "\n") {
			var p execProgress
			if json.Unmarshal([]byte(l), &p) == nil && p.State != "" {
				ps = append(ps, p)
			}
		}
		return ps
	}
	// Running at its whole rate first.
	pgtest.Eventually(t, 30*time.Second, func() error {
		ps := lines()
		if len(ps) < 2 || ps[len(ps)-1].Rate < 7 {
			return fmt.Errorf("exec progress %+v; want it running at 8/s", ps)
		}
		return nil
	})
	before := len(lines())
	throttleOut, code := tr.runShown(t, "throttled throttle --job newcomer-events --ratio 0.3 --ttl 2h --reason 'slow it during the deploy'",
		"throttle", "--primary-dsn", c.Primary.DSN(pgcluster.RoleAdmin), "--job", "newcomer-events", "--ratio", "0.3", "--ttl", "2h",
		"--reason", "slow it during the deploy")
	if code != exitOK {
		t.Fatalf("throttle: exit %d\n%s", code, throttleOut)
	}
	var scaled execProgress
	pgtest.Eventually(t, 20*time.Second, func() error {
		ps := lines()
		last := ps[len(ps)-1]
		if math.Abs(last.Rate-0.3*8) > 0.5 || !strings.Contains(last.Reason, "scaled to 30%") {
			return fmt.Errorf("exec's last progress %+v; want 2.4/s, scaled to 30%%", last)
		}
		scaled = last
		return nil
	})
	holdsOut, _ := tr.runShown(t, "throttled holds", "holds", "--primary-dsn", c.Primary.DSN(pgcluster.RoleMonitor))
	id := ""
	for _, f := range strings.Fields(holdsOut) {
		if strings.HasPrefix(f, "h") && len(f) > 1 && strings.Trim(f[1:], "0123456789") == "" {
			id = f
			break
		}
	}
	if id == "" {
		t.Fatalf("holds lists no hold id:\n%s", holdsOut)
	}
	ps := lines()
	var shown []string
	for _, p := range ps[max(0, before-2):] {
		b, _ := json.Marshal(p)
		shown = append(shown, string(b))
		if p.At.Equal(scaled.At) {
			break
		}
	}
	fmt.Fprintf(&tr.b, "\nMeanwhile, the exec's progress lines (`throttled exec --json --job newcomer-events --max-rate 8 …`), from before the override to the first line under it:\n")
	tr.shown("throttled exec --json --job newcomer-events --max-rate 8 --sql 'DELETE … LIMIT $1' …", strings.Join(shown, "\n"), 0)
	out, code = tr.runShown(t, "throttled resume --hold "+id, "resume", "--primary-dsn", c.Primary.DSN(pgcluster.RoleAdmin), "--hold", id,
		"--reason", "deploy done")
	if code != exitOK {
		t.Fatalf("resume: exit %d\n%s", code, out)
	}
	pgtest.Eventually(t, 30*time.Second, func() error {
		// One read: the exec appends lines between two.
		ps := lines()
		if len(ps) == 0 {
			return errors.New("no progress lines yet")
		}
		if last := ps[len(ps)-1]; last.Rate < 7 {
			return fmt.Errorf("exec's last progress %+v; want back at 8/s", last)
		}
		return nil
	})

	if docPath != "" {
		doc := "# A newcomer's path\n\nRegenerated by `make transcript` (TestNewcomerTranscript in cmd/throttled, on a throwaway primary and replica); never edited by hand. Ports and hold ids vary from run to run.\n" + tr.b.String()
		if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// procExit is a finished command's exit code: 0 for no error.
func procExit(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return 1
}
