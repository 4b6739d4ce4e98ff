package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/status"
	"github.com/throttled/throttled/throttle"
)

// The binding reaches the API as text for people and as its signal's
// name and labels for programs: a required replica that is not there
// makes the decision stale on that replica's signal, and /v1/status and
// /v1/jobs/{job} name the signal and the replica's label apart, beside
// the text, which is the same signal with the same label.
func TestAPIGivesTheBindingsSignalAndLabels(t *testing.T) {
	c := pgtest.Cluster(t)
	client, err := throttled.Open(context.Background(), throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true,
		Signals:    signals.Config{Replicas: []string{"ghost"}},
		Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20, Replicas: map[string]throttle.ReplicaPolicy{"ghost": throttle.ReplicaRequired}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv, err := sidecar.New(client, configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: 10}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	ghost := map[string]string{signals.LabelReplica: "ghost"}
	read := func(path string, v any) error {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(body, v); err != nil {
			return fmt.Errorf("GET %s: %d %s: %w", path, resp.StatusCode, body, err)
		}
		return nil
	}
	// The text is the key of the signal and labels given apart.
	agrees := func(text, signal string, labels map[string]string) error {
		want := status.Binding{Signal: signals.Name(signal), Labels: ghost}.String()
		if signal == "" || !maps.Equal(labels, ghost) || text != want {
			return fmt.Errorf("binding %q, binding_signal %q, binding_labels %v; want a replica signal with labels %v, and %q", text, signal, labels, ghost, want)
		}
		return nil
	}
	pgtest.Eventually(t, 30*time.Second, func() error {
		var st api.Status
		if err := read("/v1/status", &st); err != nil {
			return err
		}
		if st.Decision == nil || st.Decision.Mode != "stale" {
			return fmt.Errorf("status %+v; want a stale decision", st.Decision)
		}
		if err := agrees(st.Decision.Binding, st.Decision.BindingSignal, st.Decision.BindingLabels); err != nil {
			return fmt.Errorf("/v1/status: %w", err)
		}
		var job api.Job
		if err := read("/v1/jobs/a", &job); err != nil {
			return err
		}
		if err := agrees(job.Binding, job.BindingSignal, job.BindingLabels); err != nil {
			return fmt.Errorf("/v1/jobs/a (%s %s): %w", job.State, job.Code, err)
		}
		return nil
	})
}
