package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// Under systemd (Type=notify-reload), run says READY=1 once it serves,
// RELOADING=1 (with the monotonic time) and READY=1 again around a reload,
// and STOPPING=1 as it stops, on $NOTIFY_SOCKET.
func TestRunTellsSystemdItsState(t *testing.T) {
	c := pgtest.Cluster(t)
	t.Setenv("THROTTLED_TEST_TOKEN_OPS", opsToken)
	t.Setenv("THROTTLED_TEST_TOKEN_VIEWER", viewerToken)
	t.Setenv("THROTTLED_TEST_TOKEN_WORKER", workerToken)
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	next := func() string {
		t.Helper()
		_ = ln.SetReadDeadline(time.Now().Add(30 * time.Second))
		b := make([]byte, 4096)
		n, err := ln.Read(b)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(b[:n])
	}
	addr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "throttled.hcl")
	writeConfig(t, path, c, addr, "replica1", "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--log-level", "off"}, &bytes.Buffer{}, &bytes.Buffer{})
	}()
	defer func() { cancel(); <-done }()
	if m := next(); !strings.HasPrefix(m, "READY=1\n") || !strings.Contains(m, "STATUS=serving on") {
		t.Fatalf("first notification %q; want READY=1 with a status", m)
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/reload", nil)
	req.Header.Set("Authorization", "Bearer "+opsToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if m := next(); !strings.HasPrefix(m, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Errorf("at the reload %q; want RELOADING=1 with MONOTONIC_USEC", m)
	}
	if m := next(); !strings.HasPrefix(m, "READY=1") {
		t.Errorf("after the reload %q; want READY=1", m)
	}
	cancel()
	if m := next(); m != "STOPPING=1" {
		t.Errorf("at the stop %q; want STOPPING=1", m)
	}
}
