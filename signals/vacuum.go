package signals

import (
	"strings"
	"time"
)

// vacuumSQL reads every vacuum in progress (autovacuum workers and manual
// VACUUMs alike: both compete with a cleanup job for its table's pages and
// locks), from pg_stat_progress_vacuum joined to pg_stat_activity, which
// pg_read_all_stats lets the monitoring role see whole:
//   - per table of this database, schema-qualified as nspname.relname
//     (unquoted), how many vacuums run on it;
//   - in every database, how many autovacuum workers run to prevent
//     wraparound: the server starts those whatever autovacuum's settings,
//     they cannot be cancelled by a lock conflict, and a job that writes
//     more transaction IDs only makes them longer.
//
// A table of another database has no name here (its relid means nothing
// in ours), so it counts only towards antiwraparound_vacuums.
const vacuumSQL = `SELECT coalesce(n.nspname || '.' || c.relname, ''),
  (p.datid = (SELECT oid FROM pg_database WHERE datname = current_database())),
  coalesce(a.backend_type = 'autovacuum worker' AND a.query LIKE '%(to prevent wraparound)%', false)
FROM pg_stat_progress_vacuum p
LEFT JOIN pg_stat_activity a ON a.pid = p.pid
LEFT JOIN pg_class c ON c.oid = p.relid
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
ORDER BY 1`

// LabelTable names a table as schema.table.
const LabelTable = "table"

// vacuumRow is one row of vacuumSQL: one vacuum in progress.
type vacuumRow struct {
	table      string
	here       bool
	wraparound bool
}

// vacuumSamples turns the vacuums in progress into vacuum_running per table
// of this database (only tables with one: a table without a sample has no
// vacuum, which vacuum_running_tables vouches for), vacuum_running_tables
// (always present: the reading a rule on a table falls back to), and
// antiwraparound_vacuums.
func vacuumSamples(rows []vacuumRow, at time.Time) []Sample {
	per := map[string]float64{}
	var order []string
	wrap := 0.0
	for _, r := range rows {
		if r.wraparound {
			wrap++
		}
		if !r.here || r.table == "" {
			continue
		}
		if _, ok := per[r.table]; !ok {
			order = append(order, r.table)
		}
		per[r.table]++
	}
	var out []Sample
	for _, t := range order {
		out = append(out, Sample{Name: VacuumRunning, Labels: map[string]string{LabelTable: t}, Value: per[t], Raw: per[t], Unit: UnitVacuums, At: at})
	}
	n := float64(len(order))
	return append(out,
		Sample{Name: VacuumRunningTables, Value: n, Raw: n, Unit: UnitTables, At: at},
		Sample{Name: AntiWraparoundVacuums, Value: wrap, Raw: wrap, Unit: UnitVacuums, At: at})
}

func vacuumFailed(at time.Time, err error) []Sample {
	return []Sample{failed(VacuumRunningTables, nil, UnitTables, at, err), failed(AntiWraparoundVacuums, nil, UnitVacuums, at, err)}
}

// TableName is the name vacuum_running labels a table with: schema.table,
// with public for a name without a schema, folded to lower case unless
// quoted as PostgreSQL folds an identifier. It does not resolve
// search_path: a job names its tables as the catalog does.
func TableName(s string) string {
	schema, table, ok := strings.Cut(s, ".")
	if !ok {
		schema, table = "public", s
	}
	return foldIdent(schema) + "." + foldIdent(table)
}

func foldIdent(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	}
	return strings.ToLower(s)
}

// VacuumOn is the reading of vacuum_running for table (as [TableName]
// names it) in snap: the table's sample, else, while
// vacuum_running_tables vouches that the read succeeded, 0 at that
// sample's time. Without a usable vacuum_running_tables it returns that
// sample (failed or stale as it is) and false: unknown, never 0.
func VacuumOn(snap Snapshot, table string) (Sample, bool) {
	if s, ok := snap.Get(VacuumRunning, map[string]string{LabelTable: table}); ok {
		return s, true
	}
	all, ok := snap.Get(VacuumRunningTables, nil)
	if !ok || all.Err != nil {
		return all, false
	}
	return Sample{Name: VacuumRunning, Labels: map[string]string{LabelTable: table}, Unit: UnitVacuums, At: all.At}, true
}
