package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// /readyz answers anyone (a kubelet carries no token), so what it says is
// fixed words: with the holds table gone, it says they cannot be read,
// and nothing of the database's error (which names tables, and can name
// addresses and roles). /v1/status, behind a token, has the details. On
// the old code the body carried "hold state unconfirmed (... relation
// \"throttled.holds\" does not exist (SQLSTATE 42P01))".
func TestReadyzSaysFixedWordsOnly(t *testing.T) {
	_, db, hs := coordinatedServer(t)
	ctx := context.Background()
	waitReady(t, hs.URL)
	if _, err := db.Exec(ctx, "ALTER TABLE throttled.holds RENAME TO holds_readyz_test"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec(context.Background(), "ALTER TABLE throttled.holds_readyz_test RENAME TO holds"); err != nil {
			t.Errorf("put the holds table back: %v", err)
		}
		waitReady(t, hs.URL)
	})
	var body string
	pgtest.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Get(hs.URL + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "the holds cannot be read") {
			return fmt.Errorf("/readyz = %d %s", resp.StatusCode, b)
		}
		return nil
	})
	for _, leak := range []string{"SQLSTATE", "relation", "throttled.holds", "does not exist", "127.0.0.1", "unconfirmed ("} {
		if strings.Contains(body, leak) {
			t.Errorf("/readyz tells a caller without a token %q:\n%s", leak, body)
		}
	}
	if body == "" {
		t.Error(errors.New("no body"))
	}
}
