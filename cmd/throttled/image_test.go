package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// podman runs podman with args, bounded by two minutes.
func podman(args ...string) (string, error) {
	cmd := exec.Command("podman", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// noContainers are the errors of a machine that can build images but not
// run containers: the sandboxes CI runs in often lack CAP_SYS_RESOURCE or
// a usable cgroup hierarchy.
var noContainers = []string{"setrlimit", "cgroups in hybrid mode", "cgroup", "OCI permission denied", "not compatible with NoCgroups"}

// The image make image builds starts, as the non-root user, with no
// shell, reads a configuration mounted read-only, reaches the pair on the
// host's network and serves: /readyz answers 200.
func TestTheImageRunsTheSidecar(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed; make test installs it (scripts/ensure-podman)")
	}
	c := pgtest.Cluster(t)
	const tag = "localhost/throttled:test"
	build := exec.Command("../../scripts/build-image", tag)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build-image: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = podman("rmi", "-f", tag) })
	if user, err := podman("image", "inspect", "--format", "{{.Config.User}}", tag); err != nil || user != "65532:65532" {
		t.Errorf("image user %q, %v; want 65532:65532, not root", user, err)
	}

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	path := filepath.Join(dir, "throttled.hcl")
	writeConfig(t, path, c, addr, "replica1", "")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("throttled-test-%d", os.Getpid())
	args := []string{"run", "-d", "--name", name, "--network", "host", "--read-only",
		"-v", dir + ":/etc/throttled:ro",
		"-e", "THROTTLED_TEST_TOKEN_OPS=" + opsToken, "-e", "THROTTLED_TEST_TOKEN_VIEWER=" + viewerToken, "-e", "THROTTLED_TEST_TOKEN_WORKER=" + workerToken,
		tag, "run", "--config", "/etc/throttled/throttled.hcl"}
	t.Cleanup(func() { _, _ = podman("rm", "-f", name) })
	var runtime []string
	out, err := podman(args...)
	if err != nil && containsAny(out, noContainers) {
		// Where crun may not set rlimits or cgroups, runc with rlimits no
		// higher than this process's may still run it.
		_, _ = podman("rm", "-f", name)
		runtime = []string{"--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
		out, err = podman(append(append([]string{"run"}, runtime...), args[1:]...)...)
	}
	if err != nil && containsAny(out, noContainers) {
		t.Skipf("this machine builds images but cannot run containers: %s", out)
	}
	if err != nil {
		t.Fatalf("podman run: %v: %s", err, out)
	}
	defer func() {
		if t.Failed() {
			logs, _ := podman("logs", name)
			t.Logf("container logs:\n%s", logs)
		}
	}()
	waitReady(t, "http://"+addr, 30*time.Second)
	shell := append(append([]string{"run", "--rm"}, runtime...), "--entrypoint", "/bin/sh", tag, "-c", "true")
	if out, err := podman(shell...); err == nil || !strings.Contains(out, "no such file or directory") {
		t.Errorf("podman run --entrypoint /bin/sh: %v: %s; want no /bin/sh in the image", err, out)
	}
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}
