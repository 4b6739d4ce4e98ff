package signals

import (
	"testing"
)

func TestTargetSessionAttrsIsRead(t *testing.T) {
	t.Setenv("PGTARGETSESSIONATTRS", "")
	for dsn, want := range map[string]string{
		"postgres://u@h1,h2/db?target_session_attrs=read-write": "read-write",
		"host=h1,h2 dbname=db target_session_attrs=primary":     "primary",
		"host=h1 target_session_attrs='any'":                    "any",
		"postgres://u@h1/db":                                    "",
	} {
		if got := targetSessionAttrs(dsn); got != want {
			t.Errorf("targetSessionAttrs(%q) = %q, want %q", dsn, got, want)
		}
	}
	t.Setenv("PGTARGETSESSIONATTRS", "read-write")
	if got := targetSessionAttrs("host=h1"); got != "read-write" {
		t.Errorf("from the environment: %q", got)
	}
}

// A standby's attribute on the primary's DSN (and the reverse) is refused
// at New, saying what to use.
func TestTargetSessionAttrsThatCannotFindTheServerAreRefused(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		kind serverKind
	}{
		{"postgres://u@h1,h2/db?target_session_attrs=standby", kindPrimary},
		{"postgres://u@h1,h2/db?target_session_attrs=read-only", kindPrimary},
		{"postgres://u@h1,h2/db?target_session_attrs=read-write", kindReplica},
	} {
		if _, err := newServer(tc.kind, tc.dsn, DefaultTimeout, false, nil); err == nil {
			t.Errorf("%s for the %s: accepted", tc.dsn, tc.kind)
		}
	}
}
