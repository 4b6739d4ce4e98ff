package signals

import (
	"strings"
	"testing"
)

// A query calling a function whose effect outlives the sample or reaches
// another session is refused at load, naming the function, however the
// call is written: quoted, schema-qualified, upper case, with spaces,
// comments or a newline before its parenthesis, or inside a query given
// as text.
func TestCustomSignalRefusesLastingEffects(t *testing.T) {
	for q, fn := range map[string]string{
		`SELECT 1 FROM (SELECT pg_advisory_lock(777)) a`:                                     "pg_advisory_lock",
		`SELECT 1 FROM (SELECT pg_catalog."pg_advisory_lock" (1)) a`:                         "pg_advisory_lock",
		`select PG_CATALOG.PG_TRY_ADVISORY_LOCK_SHARED(1)::int`:                              "pg_try_advisory_lock_shared",
		"SELECT pg_advisory_xact_lock\n(1)":                                                  "pg_advisory_xact_lock",
		`SELECT pg_advisory_lock/* a comment */(1)`:                                          "pg_advisory_lock",
		`SELECT pg_advisory_lock /* nested /* comment */ still */ (1)`:                       "pg_advisory_lock",
		"SELECT pg_advisory_lock -- a comment\n (1)":                                         "pg_advisory_lock",
		`SELECT pg_cancel_backend(pid)::int FROM pg_stat_activity LIMIT 1`:                   "pg_cancel_backend",
		`SELECT pg_terminate_backend(1)::int`:                                                "pg_terminate_backend",
		`SELECT 1 FROM (SELECT pg_notify('c', 'x')) a`:                                       "pg_notify",
		`SELECT pg_reload_conf()::int`:                                                       "pg_reload_conf",
		`SELECT pg_rotate_logfile()::int`:                                                    "pg_rotate_logfile",
		`SELECT 1 FROM pg_switch_wal()`:                                                      "pg_switch_wal",
		`SELECT 1 FROM pg_create_restore_point('x')`:                                         "pg_create_restore_point",
		`SELECT 1 FROM pg_create_logical_replication_slot('s', 'test_decoding')`:             "pg_create_logical_replication_slot",
		`SELECT 1 FROM pg_create_physical_replication_slot('s')`:                             "pg_create_physical_replication_slot",
		`SELECT 1 FROM pg_drop_replication_slot('s')`:                                        "pg_drop_replication_slot",
		`SELECT count(*) FROM pg_logical_slot_get_changes('s', NULL, NULL)`:                  "pg_logical_slot_get_changes",
		`SELECT pg_replication_origin_create('o')`:                                           "pg_replication_origin_create",
		`SELECT 1 FROM pg_logical_emit_message(false, 'p', 'm')`:                             "pg_logical_emit_message",
		`SELECT nextval('s')`:                                                                "nextval",
		`SELECT "setval"('s', 1)`:                                                            "setval",
		`SELECT lo_unlink(1)`:                                                                "lo_unlink",
		`SELECT lo_create(0)::int`:                                                           "lo_create",
		`SELECT count(*) FROM dblink('dbname=x', 'SELECT 1') AS t(x int)`:                    "dblink",
		`SELECT 1 FROM dblink_exec('DELETE FROM t')`:                                         "dblink_exec",
		`SELECT pg_file_write('f', 'x', false)`:                                              "pg_file_write",
		`SELECT pg_file_unlink('f')::int`:                                                    "pg_file_unlink",
		`SELECT 1 FROM pg_sleep(5)`:                                                          "pg_sleep",
		`SELECT 1 FROM pg_sleep_for('5 s')`:                                                  "pg_sleep_for",
		`SELECT pg_stat_reset()::int`:                                                        "pg_stat_reset",
		`SELECT length(query_to_xml('SELECT 1', true, false, '')::text)`:                     "query_to_xml",
		`SELECT length(query_to_xml('select "pg_advisory_lock"(1)', true, false, '')::text)`: "pg_advisory_lock",
	} {
		ps := (CustomSignal{Name: "q", Query: q}).Problems()
		if !strings.Contains(strings.Join(ps, "\n"), "query calls "+fn+"(): refused") {
			t.Errorf("%q: problems %q; want %s() refused", q, ps, fn)
		}
	}
	if ps := (CustomSignal{Name: "q", Query: `SELECT U&"pg_advisory_lo\0063k"(1)`}).Problems(); len(ps) == 0 {
		t.Errorf("a U& identifier passed")
	}
	// Reads, including ones whose names come close, pass.
	for _, q := range []string{
		"SELECT count(*) FROM orders_queue",
		"SELECT nextval FROM counters", // a column, not a call
		"SELECT count(*) FROM pg_file_settings WHERE error IS NOT NULL",
		"SELECT count(*) FROM pg_replication_slots",
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'",
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
		"SELECT extract(epoch FROM now() - min(created_at)) FROM outbox",
		"SELECT my_pg_sleep_counter(1)", // a name that only contains one
	} {
		if ps := (CustomSignal{Name: "q", Query: q}).Problems(); len(ps) != 0 {
			t.Errorf("%q: refused: %q", q, ps)
		}
	}
}
