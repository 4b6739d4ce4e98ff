package sidecar_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/sidecar"
)

const workToken = "work-token-0123456789abcdef"

func workServer(t *testing.T) string {
	t.Helper()
	client, _ := coordinatedClient(t)
	cfg := configWith("v1", config.Job{Name: "a", Weight: 1, MaxRate: 10})
	cfg.Tokens = []config.Token{{Name: "worker", Secret: workToken, Scopes: []config.Scope{config.ScopeWork}}}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// Every bad input gets a clear error: a negative n is refused with 400,
// not taken as 1.
func TestAcquireRefusesNegativeN(t *testing.T) {
	base := workServer(t)
	for _, body := range []string{`{"n": -5, "max_wait": "0s"}`, `{"n": -1}`} {
		req, _ := http.NewRequest("POST", base+"/v1/jobs/a/acquire", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+workToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: got %d %s, want 400 naming n", body, resp.StatusCode, b)
		}
	}
}
