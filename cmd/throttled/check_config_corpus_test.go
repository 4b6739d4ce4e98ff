package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// check-config and run never disagree: over a corpus of good and bad
// files, every file check-config calls invalid (exit 4) run refuses before
// it connects anywhere, with the same first error line and the same exit
// code; every file check-config --live calls valid, run starts on and
// serves. Offline, check-config needs no secret.
func TestCheckConfigAndRunNeverDisagree(t *testing.T) {
	c := pgtest.Cluster(t)
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	t.Setenv("THROTTLED_TEST_TOKEN_VIEWER", viewerToken)
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
	dir := t.TempDir()
	bad := map[string]string{
		"syntax":           "primary {\n  dsn = \n}\n",
		"no primary":       "listen {\n  address = \"127.0.0.1:1\"\n}\n",
		"no listen":        fmt.Sprintf("primary {\n  dsn = %q\n  cores = 2\n}\n", c.Primary.DSN(pgcluster.RoleMonitor)),
		"bad dsn":          "primary {\n  dsn = \"postgres://u@h:port/db\"\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:1\"\n}\n",
		"unknown block":    "primary {\n  dsn = \"host=h\"\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:1\"\n}\nthrottle {\n}\n",
		"bad window":       "primary {\n  dsn = \"host=h\"\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:1\"\n}\njob \"x\" {\n  run_windows = [\"1-6 UTC\"]\n}\n",
		"gate critical":    "primary {\n  dsn = \"host=h\"\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:1\"\n}\nsignal \"vacuum_running\" {\n  target = 0\n  critical = 1\n}\n",
		"short token":      "primary {\n  dsn = \"host=h\"\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:1\"\n}\ntoken \"t\" {\n  secret = \"short\"\n  scopes = [\"read\"]\n}\n",
		"bad listen":       "primary {\n  dsn = \"host=h\"\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:99999\"\n}\n",
		"two statements":   "primary {\n  dsn = \"host=h\"\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:1\"\n}\ncustom_signal \"q\" {\n  query = \"SELECT 1; SELECT 2\"\n}\n",
		"missing job rule": "primary {\n  dsn = \"host=h\"\n  cores = 2\n}\nlisten {\n  address = \"127.0.0.1:1\"\n}\njob \"x\" {\n  signals = [\"q\"]\n}\n",
	}
	for name, src := range bad {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".hcl")
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			var cOut, cErr, rErr bytes.Buffer
			cc := run(context.Background(), []string{"check-config", "--config", path}, &cOut, &cErr)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rc := run(ctx, []string{"run", "--config", path, "--log-level", "off"}, &bytes.Buffer{}, &rErr)
			if cc != exitConfig || rc != exitConfig {
				t.Fatalf("check-config exit %d (%s), run exit %d (%s); want both %d", cc, cErr.String(), rc, rErr.String(), exitConfig)
			}
			first := func(s, cmd string) string {
				line, _, _ := strings.Cut(strings.TrimPrefix(s, "throttled "+cmd+": "), "\n")
				return line
			}
			if a, b := first(cErr.String(), "check-config"), first(rErr.String(), "run"); a != b || !strings.Contains(a, ".hcl") {
				t.Errorf("check-config says %q, run says %q; want the same error, naming the file", a, b)
			}
		})
	}

	// A good file: valid offline without its secrets, with them, against
	// the cluster, and run serves on it.
	addr := freeAddr(t)
	path := filepath.Join(dir, "good.hcl")
	writeConfig(t, path, c, addr, "replica1", "")
	offline := run(context.Background(), []string{"check-config", "--config", path}, &bytes.Buffer{}, &bytes.Buffer{})
	os.Unsetenv("THROTTLED_TEST_TOKEN_WORKER")
	withoutOne := run(context.Background(), []string{"check-config", "--config", path}, &bytes.Buffer{}, &bytes.Buffer{})
	missing := run(context.Background(), []string{"check-config", "--config", path, "--secrets"}, &bytes.Buffer{}, &bytes.Buffer{})
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
	var liveErr bytes.Buffer
	live := run(context.Background(), []string{"check-config", "--config", path, "--live"}, &bytes.Buffer{}, &liveErr)
	if offline != exitOK || withoutOne != exitOK || missing != exitConfig || live != exitOK {
		t.Fatalf("good file: offline %d, offline without a secret %d, --secrets without it %d (want %d), --live %d (%s)",
			offline, withoutOne, missing, exitConfig, live, liveErr.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--log-level", "off"}, &bytes.Buffer{}, &bytes.Buffer{})
	}()
	waitReady(t, "http://"+addr, 30*time.Second)
	cancel()
	if rc := <-done; rc != exitOK {
		t.Errorf("run on the good file exited %d after it was stopped", rc)
	}
}
