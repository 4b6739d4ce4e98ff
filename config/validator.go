package config

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/jackc/pgx/v5/pgconn"
)

// shownURL is a URL fit for an error message: its password and query
// (where tokens live) left out, as the value may come from env() or a
// file.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	return u.Redacted()
}

type validator struct {
	// withoutSecrets: a secret that cannot be read stands for one that
	// will be (LoadWithoutSecrets).
	withoutSecrets bool
	errs           []error
	seen           map[string]hcl.Range // kind and label of each labelled block → its first place
}

func (v *validator) bad(r hcl.Range, format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf("config: %s:%d: "+format, append([]any{r.Filename, r.Start.Line}, args...)...))
}

// first reports whether the block of kind labelled name at r is the first
// of its kind and label, and refuses any later one naming both places:
// taking the last (or the first) silently would leave the file saying one
// thing and throttled doing another.
func (v *validator) first(r hcl.Range, kind, name string) bool {
	key := kind + " " + name
	if at, dup := v.seen[key]; dup {
		v.bad(r, "%s %q is configured twice, here and at %s:%d; keep one", kind, name, at.Filename, at.Start.Line)
		return false
	}
	if v.seen == nil {
		v.seen = map[string]hcl.Range{}
	}
	v.seen[key] = r
	return true
}

func (v *validator) duration(r hcl.Range, field string, s *string, def time.Duration) time.Duration {
	if s == nil {
		return def
	}
	d, err := time.ParseDuration(*s)
	if err != nil || d <= 0 {
		v.bad(r, "%s = %q: want a positive duration such as \"3s\" or \"1h\"", field, *s)
		return def
	}
	return d
}

// dsn refuses a connection string pgx cannot parse, naming field (the
// error never holds the password); a secret not read is not checked.
func (v *validator) dsn(r hcl.Range, field, dsn string) {
	if _, unset := Unset(dsn); unset || strings.TrimSpace(dsn) == "" {
		return
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		v.bad(r, "%s: %v", field, err)
	}
}

func (v *validator) secret(r hcl.Range, field string, inline, path *string) string {
	switch {
	case inline != nil && path != nil:
		v.bad(r, "give %s or %s_file, not both", field, field)
	case path != nil:
		b, err := os.ReadFile(*path)
		if err != nil && v.withoutSecrets {
			return unsetPrefix + "file " + *path
		}
		if err != nil {
			v.bad(r, "%s_file: %v", field, err)
			return ""
		}
		return strings.TrimSpace(string(b))
	case inline != nil:
		return *inline
	}
	return ""
}
