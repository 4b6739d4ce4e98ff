package signals

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Multi-host connection strings, the libpq habit for finding the primary
// (postgres://…@host1,host2/db?target_session_attrs=read-write): pgx
// tries each host and keeps the first that passes target_session_attrs'
// check. That check asks SHOW transaction_read_only, and the sampler's
// own sessions are read-only by default_transaction_read_only, so
// read-write would refuse every host, the primary too. For the sampler,
// what the user means is the server's role, so the check is on it:
//
//   - read-write and primary keep the host that is not in recovery
//     (pg_is_in_recovery() false);
//   - read-only and standby keep one in recovery; prefer-standby and any
//     keep pgx's own (no check is read-only-sensitive there).
//
// The primary sampler then checks the kind it connected to anyway, and
// refuses a standby DSN for the primary (and a primary one for a replica)
// at start, with the reason.

var keywordTSA = regexp.MustCompile(`(?:^|\s)target_session_attrs\s*=\s*'?([A-Za-z-]+)'?`)

// targetSessionAttrs is the target_session_attrs dsn asks for, from the
// DSN (URL or keyword/value) or PGTARGETSESSIONATTRS, "" when none.
func targetSessionAttrs(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			if v := u.Query().Get("target_session_attrs"); v != "" {
				return v
			}
		}
	} else if m := keywordTSA.FindStringSubmatch(dsn); m != nil {
		return m[1]
	}
	return os.Getenv("PGTARGETSESSIONATTRS")
}

// checkRoleNotReadOnly replaces a read-only-sensitive target_session_attrs
// check by one on the server's role, for a connection whose sessions are
// read-only by our own setting. It refuses an attribute that cannot find
// the kind of server this connection is for.
func checkRoleNotReadOnly(cfg *pgconn.Config, dsn string, kind serverKind) error {
	tsa := targetSessionAttrs(dsn)
	switch {
	case tsa == "" || tsa == "any" || tsa == "prefer-standby":
		return nil
	case kind == kindPrimary && (tsa == "read-write" || tsa == "primary"):
		cfg.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsPrimary
	case kind == kindReplica && (tsa == "read-only" || tsa == "standby"):
		cfg.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsStandby
	case kind == kindPrimary:
		return fmt.Errorf("target_session_attrs=%s finds a standby, but this DSN is the primary's: use read-write or primary", tsa)
	default:
		return fmt.Errorf("target_session_attrs=%s finds a primary, but this DSN is a replica's: use read-only or standby", tsa)
	}
	return nil
}
