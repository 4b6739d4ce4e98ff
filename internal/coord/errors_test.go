package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/coord/store"
)

// denied turns a refusal for want of a privilege on one of coordinated
// mode's tables, and only that, into a permissionError that names the
// GRANT; every other error passes unchanged.
func TestDenied(t *testing.T) {
	// The pool connects on first use, and is never used: denied reads
	// only its role.
	pool, err := pgxpool.New(context.Background(), "postgres://Coord%20Role@127.0.0.1:1/postgres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := &Engine{pool: pool}
	refused := &pgconn.PgError{Code: "42501", Message: "permission denied for table workers"}
	timeout := &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}
	already := &permissionError{role: "other", table: store.LeaderTable, err: refused}
	for _, tc := range []struct {
		name string
		err  error
		// table is the permissionError's table; "" when err must pass
		// unchanged.
		table string
	}{
		{"refused on workers", &store.TableError{Table: store.WorkersTable, Err: refused}, store.WorkersTable},
		{"refused on leader", fmt.Errorf("publish: %w", &store.TableError{Table: store.LeaderTable, Err: refused}), store.LeaderTable},
		{"another SQLSTATE", &store.TableError{Table: store.WorkersTable, Err: timeout}, ""},
		{"refused on no known table", refused, ""},
		{"already said", fmt.Errorf("beat: %w", already), ""},
		{"no error", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e.denied(tc.err)
			var perm *permissionError
			if tc.table == "" {
				if got != tc.err {
					t.Fatalf("denied(%v) = %v; want it unchanged", tc.err, got)
				}
				return
			}
			if !errors.As(got, &perm) || perm.table != tc.table || perm.role != "Coord Role" {
				t.Fatalf("denied(%v) = %#v; want a permissionError of role %q on %s", tc.err, got, "Coord Role", tc.table)
			}
			if !errors.Is(got, refused) {
				t.Error("the permissionError does not wrap the server's refusal")
			}
			msg := got.Error()
			for _, want := range []string{
				"permission denied",
				"42501",
				`GRANT USAGE ON SCHEMA throttled TO "Coord Role"`,
				fmt.Sprintf(`GRANT %s ON %s TO "Coord Role"`, tablePrivileges[tc.table], tc.table),
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("%q does not say %q", msg, want)
				}
			}
			if strings.Contains(msg, "cannot reach") {
				t.Errorf("%q blames reachability", msg)
			}
		})
	}
}

// Every table a Store statement may be refused on has the privileges its
// GRANT names.
func TestTablePrivilegesNameEveryTable(t *testing.T) {
	for _, table := range []string{store.WorkersTable, store.LeaderTable} {
		if tablePrivileges[table] == "" {
			t.Errorf("no privileges for %s: its GRANT would name none", table)
		}
	}
}
