package signals

import (
	"errors"
	"time"
)

// walSQL reads the primary's WAL insert position (bytes since 0/0), and
// the archiver: whether archive_mode is on, the segments waiting to be
// archived (.ready files in archive_status; pg_ls_archive_statusdir is
// granted to pg_monitor), and whether the last attempt failed (a failure
// after the last success).
const walSQL = `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8,
  current_setting('archive_mode') <> 'off',
  (SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready'),
  coalesce(a.last_failed_time > coalesce(a.last_archived_time, '-infinity'::timestamptz), false)
FROM pg_stat_archiver a`

// WALRateWindow is the shortest window the WAL rate is measured over: a
// checkpoint or one large commit would make a shorter one jump.
const WALRateWindow = 2 * time.Second

// errWALWarmup marks a WAL rate asked before a window of readings exists.
var errWALWarmup = errors.New("signals: the WAL rate needs readings over " + WALRateWindow.String())

// walRow is one reading of walSQL.
type walRow struct {
	lsn           float64
	archiveOn     bool
	pending       int64
	archiveFailed bool
}

// walPoint is one WAL position and when it was read.
type walPoint struct {
	at  time.Time
	lsn float64
}

// walRate keeps the recent WAL positions the rate is measured over.
type walRate struct{ points []walPoint }

// add records a reading at and returns the rate over the newest window of
// at least WALRateWindow, or errWALWarmup before there is one. A position
// that went back (a server restored, a promoted replica) starts over, and
// so does a gap of more than two windows without readings (a sampler that
// stopped, a leader that stepped down): an average over the gap would
// hide a burst now.
func (w *walRate) add(at time.Time, lsn float64) (float64, error) {
	if n := len(w.points); n > 0 && (lsn < w.points[n-1].lsn || !at.After(w.points[n-1].at) || at.Sub(w.points[n-1].at) > 2*WALRateWindow) {
		w.points = w.points[:0]
	}
	w.points = append(w.points, walPoint{at, lsn})
	// Keep the newest point at least a window older than now, and later
	// ones.
	i := 0
	for i+1 < len(w.points) && at.Sub(w.points[i+1].at) >= WALRateWindow {
		i++
	}
	w.points = w.points[i:]
	first := w.points[0]
	span := at.Sub(first.at)
	if span < WALRateWindow {
		return 0, errWALWarmup
	}
	return (lsn - first.lsn) / span.Seconds(), nil
}

// samples turns one reading into wal_bytes_per_second,
// archive_pending_segments (0 with archive_mode off) and archive_failing.
func (r walRow) samples(rate *walRate, at time.Time) []Sample {
	bps, err := rate.add(at, r.lsn)
	walS := Sample{Name: WALBytesPerSecond, Value: bps, Raw: bps, Unit: UnitBytesPerSecond, At: at}
	if err != nil {
		walS = failed(WALBytesPerSecond, nil, UnitBytesPerSecond, at, err)
	}
	pending := float64(r.pending)
	if !r.archiveOn {
		pending = 0 // leftovers from when it was on are nobody's backlog
	}
	failing := 0.0
	if r.archiveOn && r.archiveFailed {
		failing = 1
	}
	return []Sample{
		walS,
		{Name: ArchivePendingSegments, Value: pending, Raw: pending, Unit: UnitSegments, At: at},
		{Name: ArchiveFailing, Value: failing, Raw: failing, Unit: UnitBool, At: at},
	}
}

func walFailed(at time.Time, err error) []Sample {
	return []Sample{
		failed(WALBytesPerSecond, nil, UnitBytesPerSecond, at, err),
		failed(ArchivePendingSegments, nil, UnitSegments, at, err),
		failed(ArchiveFailing, nil, UnitBool, at, err),
	}
}
