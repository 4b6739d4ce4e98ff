package signals

import (
	"fmt"
	"strings"
	"time"
)

// slotsSQL reads, for every replication slot, physical and logical, the
// WAL it retains (from its restart_lsn to the current insert position),
// its wal_status, and the safe_wal_size left before max_slot_wal_keep_size
// invalidates it (NULL when that is unlimited).
const slotsSQL = `SELECT slot_name::text, slot_type, active,
  coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::float8,
  coalesce(wal_status, ''), safe_wal_size::float8
FROM pg_replication_slots ORDER BY slot_name`

// LabelSlot names a replication slot; LabelSlotType is physical or
// logical; LabelWALStatus is its wal_status (reserved, extended,
// unreserved, lost).
const (
	LabelSlot      = "slot"
	LabelSlotType  = "type"
	LabelWALStatus = "wal_status"
)

// slotRow is one row of slotsSQL.
type slotRow struct {
	name, kind string
	active     bool
	retained   float64
	walStatus  string
	safe       *float64
}

// slotSamples turns the slots into slot_retained_bytes (per slot, and the
// largest as slot_retained_bytes_max, 0 with no slots: the signal a rule
// reads), and slot_safe_wal_bytes where max_slot_wal_keep_size bounds it.
// A slot whose WAL is lost reads as an error, and so does the largest:
// its restart_lsn is gone (so it would read 0), and it will never catch
// up.
func slotSamples(rows []slotRow, at time.Time) []Sample {
	var out []Sample
	var lost []string
	largest := 0.0
	for _, r := range rows {
		labels := map[string]string{LabelSlot: r.name, LabelSlotType: r.kind, LabelWALStatus: r.walStatus}
		s := Sample{Name: SlotRetainedBytes, Labels: labels, Value: r.retained, Raw: r.retained, Unit: UnitBytes, At: at}
		if r.walStatus == "lost" {
			s = failed(SlotRetainedBytes, labels, UnitBytes, at, lostSlot(r.name))
			lost = append(lost, r.name)
		}
		out = append(out, s)
		largest = max(largest, r.retained)
		if r.safe != nil {
			out = append(out, Sample{Name: SlotSafeWALBytes, Labels: map[string]string{LabelSlot: r.name, LabelSlotType: r.kind},
				Value: *r.safe, Raw: *r.safe, Unit: UnitBytes, At: at})
		}
	}
	if len(lost) > 0 {
		return append(out, failed(SlotRetainedBytesMax, nil, UnitBytes, at, lostSlot(strings.Join(lost, ", "))))
	}
	return append(out, Sample{Name: SlotRetainedBytesMax, Value: largest, Raw: largest, Unit: UnitBytes, At: at})
}

func lostSlot(names string) error {
	return fmt.Errorf("signals: slot %s has lost WAL it needs (wal_status lost): its consumer must be rebuilt", names)
}

func slotsFailed(at time.Time, err error) []Sample {
	return []Sample{failed(SlotRetainedBytesMax, nil, UnitBytes, at, err)}
}
