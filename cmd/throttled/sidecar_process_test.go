package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar/api"
)

// TestSidecarProcessReloadsOnSIGHUPShedsLoadAndNeverHangs runs `throttled
// run` as its own process: SIGHUP reloads the file; past its concurrency
// limit it sheds with 503 and Retry-After; with the database hung, the
// check answers 500 at once instead of waiting; SIGTERM stops it cleanly.
func TestSidecarProcessReloadsOnSIGHUPShedsLoadAndNeverHangs(t *testing.T) {
	c := pgtest.Cluster(t)
	addr := freeAddr(t)
	path := t.TempDir() + "/throttled.hcl"
	limit := "listen {\n  address = %q\n  max_concurrent_requests = 2\n}\n"
	write := func(extra string) {
		writeConfig(t, path, c, addr, "replica1", extra)
		src, _ := os.ReadFile(path)
		// One listen block, with the concurrency limit.
		text := strings.Replace(string(src), fmt.Sprintf("listen {\n  address = %q\n}\n", addr), fmt.Sprintf(limit, addr), 1)
		os.WriteFile(path, []byte(text), 0o600)
	}
	write("")
	cmd := exec.Command(os.Args[0], "run", "--config", path, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "THROTTLED_TEST_RUN_MAIN=1", "THROTTLED_TEST_TOKEN_OPS="+opsToken,
		"THROTTLED_TEST_TOKEN_VIEWER="+viewerToken, "THROTTLED_TEST_TOKEN_WORKER="+workerToken)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	a := sidecarAPI{t: t, base: "http://" + addr}
	waitReady(t, a.base, 30*time.Second)

	// SIGHUP: a new job appears, and the version changes.
	_, st, _ := a.do("GET", "/v1/status", viewerToken, nil)
	write("job \"archive\" {\n  weight = 2\n}\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		if code, _, _ := a.do("GET", "/v1/jobs/archive", viewerToken, nil); code != 200 {
			return fmt.Errorf("archive: %d", code)
		}
		return nil
	})
	if _, st2, _ := a.do("GET", "/v1/status", viewerToken, nil); st2["config_version"] == st["config_version"] {
		t.Fatal("the version did not change on SIGHUP")
	}

	// Shedding: hold both worker slots with acquires that wait (the job
	// is held); a third acquire gets 503 at once, while an operator's
	// requests still have slots of their own.
	if code, _, _ := a.do("POST", "/v1/holds", opsToken, api.PauseRequest{Scope: "job:purge", Reason: "shed test"}); code != 201 {
		t.Fatalf("pause: %d", code)
	}
	acquire := func(maxWait string) (*http.Response, error) {
		b, _ := json.Marshal(api.AcquireRequest{N: 1, MaxWait: maxWait})
		req, _ := http.NewRequest("POST", a.base+"/v1/jobs/purge/acquire", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+workerToken)
		return http.DefaultClient.Do(req)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		resp, err := acquire("100ms")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			return fmt.Errorf("acquire on the held job got %d", resp.StatusCode)
		}
		return nil
	})
	// Each holder retries while shed (a slot is freed just after its
	// response is written), until it waits.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				resp, err := acquire("5s")
				if err != nil {
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable {
					return
				}
			}
		})
	}
	var shed *http.Response
	pgtest.Eventually(t, 4*time.Second, func() error {
		resp, err := acquire("100ms")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("a third acquire got %d while two wait", resp.StatusCode)
		}
		shed = resp
		return nil
	})
	if shed.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if code, _, _ := a.do("GET", "/v1/holds", viewerToken, nil); code != 200 {
		t.Errorf("an operator's request got %d while workers filled their slots", code)
	}
	wg.Wait()

	// The database hangs: the check answers from memory, fast: 500 once the
	// worker's lease has lapsed, never a hang.
	if err := c.HangPrimary(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.ResumePrimary)
	// Fast is judged by the checks' median: a check that waited on the
	// database would wait out a timeout every time, where one answer
	// slowed by a loaded machine is one answer. No answer in 5 s is a
	// hang.
	var took []time.Duration
	pgtest.Eventually(t, 15*time.Second, func() error {
		start := time.Now()
		req, _ := http.NewRequest("GET", a.base+"/check/archive", nil)
		req.Header.Set("Authorization", "Bearer "+viewerToken)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatalf("the check hung with the database: %v", err)
		}
		resp.Body.Close()
		took = append(took, time.Since(start))
		if resp.StatusCode != http.StatusInternalServerError {
			return fmt.Errorf("check %d", resp.StatusCode)
		}
		return nil
	})
	slices.Sort(took)
	if median := took[len(took)/2]; median > time.Second {
		t.Errorf("the checks took a median of %s with the database hung (%d checks, slowest %s); want an answer from memory", median, len(took), took[len(took)-1])
	}
	c.ResumePrimary()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("exit %d after SIGTERM:\n%s", code, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("did not stop within 30 s of SIGTERM:\n%s", out.String())
	}
}
