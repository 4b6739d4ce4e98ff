package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/sidecar"
)

// A notification with one alert whose text PostgreSQL cannot store (a
// NUL, which JSON carries as \u0000 and Go decodes into the string) is
// refused whole with 400: the good alert before it makes no hold either.
func TestGrafanaNotificationWithUnstorableAlertChangesNothing(t *testing.T) {
	ctx := context.Background()
	client, admin := coordinatedClient(t)
	cfg := configWith("v1", config.Job{Name: "grafana-unstorable", Weight: 1})
	cfg.Tokens = []config.Token{{Name: "grafana-hook", Secret: "hook-token-0123456789abcdef", Scopes: []config.Scope{config.ScopePause}}}
	srv, err := sidecar.New(client, cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	db, err := pgxpool.New(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fp := fmt.Sprintf("unstorable-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		db.Exec(context.Background(), "UPDATE throttled.holds SET released_at = now(), released_by = 'test' WHERE external_key LIKE $1 AND released_at IS NULL", "grafana:"+fp+"%")
	})
	body := `{"receiver":"throttled","status":"firing","alerts":[
	  {"status":"firing","fingerprint":"` + fp + `-a","labels":{"alertname":"HighLoad","throttled_job":"grafana-unstorable"},"annotations":{"summary":"load high"},"startsAt":"` + time.Now().UTC().Format(time.RFC3339) + `"},
	  {"status":"firing","fingerprint":"` + fp + `-b","labels":{"alertname":"LagHigh","throttled_job":"grafana-unstorable"},"annotations":{"summary":"lag\u0000high"},"startsAt":"` + time.Now().UTC().Format(time.RFC3339) + `"}]}`
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/hooks/grafana", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer hook-token-0123456789abcdef")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var n int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM throttled.holds WHERE external_key = $1 AND released_at IS NULL", "grafana:"+fp+"-a").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("notification with one unstorable alert: %d %s; the good alert's hold was made: %v (want 400 and no hold)", resp.StatusCode, strings.TrimSpace(string(answer)), n != 0)
	}
}
