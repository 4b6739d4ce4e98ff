package signals

import "time"

// wraparoundSQL reads how far the oldest database is from forced
// anti-wraparound vacuum: the larger of age(datfrozenxid) over
// autovacuum_freeze_max_age and mxid_age(datminmxid) over
// autovacuum_multixact_freeze_max_age. At 1 autovacuum must freeze the
// whole database, whatever else it does; well before 2^31 the server stops
// taking writes.
const wraparoundSQL = `SELECT greatest(
  max(age(datfrozenxid))::float8 / current_setting('autovacuum_freeze_max_age')::float8,
  max(mxid_age(datminmxid))::float8 / current_setting('autovacuum_multixact_freeze_max_age')::float8)
FROM pg_database WHERE datallowconn`

// wraparound is one reading of wraparoundSQL.
type wraparound struct{ fraction float64 }

func (w wraparound) samples(at time.Time) []Sample {
	return []Sample{{Name: WraparoundFraction, Value: w.fraction, Raw: w.fraction, Unit: UnitRatio, At: at}}
}

func wraparoundFailed(at time.Time, err error) []Sample {
	return []Sample{failed(WraparoundFraction, nil, UnitRatio, at, err)}
}
