package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An empty primary DSN (inline, from an unset or empty env var, or an
// empty dsn_file) is refused with file and line, not accepted: pgx
// turns "" into libpq defaults (local socket, $PGHOST...), i.e. some other
// server.
func TestEmptyPrimaryDSNIsRefused(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"inline": "primary {\n  dsn = \"\"\n  cores = 2\n}\n",
		"file":   "primary {\n  dsn_file = \"" + empty + "\"\n  cores = 2\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse("t.hcl", []byte(src), func(string) string { return "" })
			if err == nil {
				t.Fatalf("accepted an empty primary DSN (PrimaryDSN=%q)", c.PrimaryDSN)
			}
			if !strings.Contains(err.Error(), "t.hcl:1") || !strings.Contains(err.Error(), "dsn") {
				t.Fatalf("error does not name file, line and field: %v", err)
			}
		})
	}
}

// A bad URL is named in the error without the secrets it may carry.
func TestBadURLErrorsHideSecrets(t *testing.T) {
	src := strings.Replace(smallest, "http://127.0.0.1:18099/hook", "ftp://hook:hunter2secret@example.com/x?token=t0ps3cret", 1)
	_, err := Parse("t.hcl", []byte(src), getenv)
	if err == nil || !strings.Contains(err.Error(), "want an http(s) URL") {
		t.Fatalf("bad notifier url: %v", err)
	}
	for _, secret := range []string{"hunter2secret", "t0ps3cret"} {
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the error shows %q: %v", secret, err)
		}
	}
}
