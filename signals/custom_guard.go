package signals

import (
	"fmt"
	"slices"
	"strings"
)

// A READ ONLY transaction stops a custom signal's query from writing to
// tables, but not every effect of a function call is a write: a session
// advisory lock outlives the transaction, a cancelled backend stays
// cancelled, a reloaded configuration stays reloaded. lastingEffect
// refuses, at load, a query that calls a function with such an effect,
// and the sampler contains at run time what a function the query calls
// indirectly could still do (runCustom): together with a sampling role
// that is neither a superuser nor granted pg_signal_backend, these are the
// three layers docs/SIGNALS.md describes.

// refusedCall is why a function may not be called by a custom signal.
type refusedCall struct {
	// name is the function's name, or the start of the names refused
	// (prefix).
	name   string
	prefix bool
	why    string
}

var refusedCalls = func() []refusedCall {
	var out []refusedCall
	add := func(why string, names ...string) {
		for _, n := range names {
			prefix := strings.HasSuffix(n, "*")
			out = append(out, refusedCall{name: strings.TrimSuffix(n, "*"), prefix: prefix, why: why})
		}
	}
	// Transaction-level advisory locks end with the sample's transaction,
	// but while it runs they block throttled's own hold bookkeeping and
	// any application waiting on the same key: refused too.
	add("it takes an advisory lock, which another session waits on (a session-level one outlives the sample)",
		"pg_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
		"pg_advisory_xact_lock", "pg_advisory_xact_lock_shared", "pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared")
	add("it signals another session", "pg_cancel_backend", "pg_terminate_backend")
	add("it sends a notification to other sessions", "pg_notify")
	add("it changes the server (configuration, logs, WAL, backups, promotion)",
		"pg_reload_conf", "pg_rotate_logfile", "pg_switch_wal", "pg_switch_xlog", "pg_create_restore_point",
		"pg_promote", "pg_wal_replay_pause", "pg_wal_replay_resume", "pg_backup_start", "pg_backup_stop",
		"pg_start_backup", "pg_stop_backup", "pg_log_backend_memory_contexts", "pg_stat_reset*")
	add("it creates, drops, moves or consumes a replication slot or origin",
		"pg_create_*_replication_slot", "pg_copy_*_replication_slot", "pg_drop_replication_slot",
		"pg_replication_slot_advance", "pg_logical_slot_get_*", "pg_replication_origin_*")
	add("it writes a message to the WAL", "pg_logical_emit_message")
	add("it advances or sets a sequence", "nextval", "setval")
	add("it writes a large object or a server file",
		"lo_creat", "lo_create", "lo_import", "lo_export", "lo_unlink", "lo_put", "lo_from_bytea",
		"lo_truncate", "lo_truncate64", "lowrite", "lo_write")
	add("it runs statements on another connection, outside the sample's transaction", "dblink*")
	add("it writes, renames or removes a server file",
		"pg_file_write", "pg_file_rename", "pg_file_unlink", "pg_file_sync")
	add("it runs a query given as text, which cannot be checked", "query_to_xml*", "cursor_to_xml*")
	add("it sleeps, and a sample must be quick", "pg_sleep*")
	return out
}()

// matches reports whether fn, a lower-case function name, is refused by r.
func (r refusedCall) matches(fn string) bool {
	head, tail, wild := strings.Cut(r.name, "*")
	switch {
	case r.prefix:
		return strings.HasPrefix(fn, r.name)
	case wild:
		return len(fn) > len(head)+len(tail) && strings.HasPrefix(fn, head) && strings.HasSuffix(fn, tail)
	}
	return fn == r.name
}

// lastingEffect names, in words, each function query calls that has an
// effect outliving the sample or reaching another session, or nil. It
// reads a normalised text: lower case, double quotes dropped (so
// "pg_advisory_lock" is the function it names), schema qualification
// ignored (pg_catalog.pg_notify is pg_notify), and a name counts as a
// call when the next thing after it, past spaces and comments, is '('.
// It reads inside string literals too, so a query hidden in one is caught
// as well; a name that only looks like a call there is refused, which a
// custom signal can always avoid. A U&"..." identifier is refused: its
// escapes could spell any name.
func lastingEffect(query string) []string {
	q := strings.ReplaceAll(strings.ToLower(query), `"`, "")
	var out []string
	if strings.Contains(strings.ReplaceAll(strings.ToLower(query), " ", ""), `u&"`) {
		out = append(out, `query uses a U&"..." identifier, whose escapes could hide a function's name: write the name plainly`)
	}
	seen := map[string]bool{}
	for i := 0; i < len(q); {
		if !identStart(q[i]) {
			i++
			continue
		}
		j := i
		for j < len(q) && identPart(q[j]) {
			j++
		}
		fn := q[i:j]
		i = j
		if seen[fn] || !calledAt(q, j) {
			continue
		}
		if k := slices.IndexFunc(refusedCalls, func(r refusedCall) bool { return r.matches(fn) }); k >= 0 {
			seen[fn] = true
			out = append(out, fmt.Sprintf("query calls %s(): refused, because %s; a custom signal may only read", fn, refusedCalls[k].why))
		}
	}
	return out
}

func identStart(b byte) bool { return b == '_' || 'a' <= b && b <= 'z' }
func identPart(b byte) bool  { return identStart(b) || '0' <= b && b <= '9' || b == '$' }

// calledAt reports whether the next thing in q at i, past white space and
// comments, is '('.
func calledAt(q string, i int) bool {
	for i < len(q) {
		switch {
		case strings.IndexByte(" \t\n\r\f\v", q[i]) >= 0:
			i++
		case strings.HasPrefix(q[i:], "--"):
			nl := strings.IndexByte(q[i:], '\n')
			if nl < 0 {
				return false
			}
			i += nl + 1
		case strings.HasPrefix(q[i:], "/*"):
			i = pastComment(q, i)
		default:
			return q[i] == '('
		}
	}
	return false
}

// pastComment is where the block comment starting at q[i] ends; block
// comments nest in PostgreSQL.
func pastComment(q string, i int) int {
	depth := 0
	for i < len(q) {
		switch {
		case strings.HasPrefix(q[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(q[i:], "*/"):
			depth--
			i += 2
		default:
			i++
		}
		if depth == 0 {
			return i
		}
	}
	return i
}
