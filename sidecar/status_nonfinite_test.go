package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
	"github.com/throttled/throttled/sidecar"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/signals"
	"github.com/throttled/throttled/throttle"
)

// A custom signal that comes to read NaN, then -Infinity, shows on
// /v1/status as a failed sample naming it and its file:line, and every
// answer on the way is 200 with one JSON object. It once answered 200
// with an empty body, and `throttled status` failed with "unexpected end
// of JSON input".
func TestStatusWithANonFiniteCustomSignal(t *testing.T) {
	c := pgtest.Cluster(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	for _, q := range []string{"DROP TABLE IF EXISTS custom_reading", "CREATE TABLE custom_reading (v float8)",
		"INSERT INTO custom_reading VALUES (1)", "GRANT SELECT ON custom_reading TO " + pgcluster.RoleMonitor} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	client, err := throttled.Open(ctx, throttled.Options{PrimaryDSN: c.Primary.DSN(pgcluster.RoleMonitor), Cores: 2,
		CoordinationDSN: c.Primary.DSN(pgcluster.RoleAdmin), Coordinate: true, Controller: throttle.Config{MaxBudget: 20, InitialBudget: 20},
		Signals: signals.Config{Custom: []signals.CustomSignal{{Name: "nanval", Query: "SELECT v FROM custom_reading",
			Every: 50 * time.Millisecond, Source: "throttled.hcl:31"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	srv, err := sidecar.New(client, configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: 10}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	// nanval reads the signal from /v1/status; a status that is not 200
	// with one JSON object fails the test at once.
	nanval := func() (api.Signal, bool) {
		resp, err := http.Get(hs.URL + "/v1/status")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st api.Status
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("/v1/status: %d %q (%v); want 200 and one JSON object", resp.StatusCode, body, err)
		}
		if st.Decision != nil {
			for _, s := range st.Decision.Signals {
				if s.Name == "nanval" {
					return s, true
				}
			}
		}
		return api.Signal{}, false
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		if s, ok := nanval(); !ok || s.Value == nil || *s.Value != 1 {
			return fmt.Errorf("nanval on /v1/status: %+v; want 1 on the leader", s)
		}
		return nil
	})
	for _, tc := range []struct{ set, says string }{{"'NaN'", "read NaN"}, {"'-Infinity'", "read -Inf"}} {
		if _, err := admin.Exec(ctx, "UPDATE custom_reading SET v = "+tc.set); err != nil {
			t.Fatal(err)
		}
		pgtest.Eventually(t, 10*time.Second, func() error {
			s, _ := nanval()
			if s.Value != nil || !strings.Contains(s.Error, tc.says+"; a custom signal must return a finite number") ||
				!strings.Contains(s.Error, `custom signal "nanval" (throttled.hcl:31)`) {
				return fmt.Errorf("nanval on /v1/status: %+v; want no value, saying %q and where it was defined", s, tc.says)
			}
			return nil
		})
	}
}
