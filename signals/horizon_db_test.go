package signals

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// holder returns the xmin_horizon_holder sample of a fresh tick, or an
// error when there is none.
func holder(t *testing.T, p *Poller) (Sample, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Tick(ctx)
	for _, s := range p.Snapshot().Samples {
		if s.Name == XminHorizonHolder {
			return s, nil
		}
	}
	return Sample{}, fmt.Errorf("no %s sample", XminHorizonHolder)
}

// waitSessionHolder polls until session pid is the horizon's holder, at
// least minXIDs old, or fails the test.
func waitSessionHolder(t *testing.T, p *Poller, pid int, minXIDs float64) {
	t.Helper()
	waitHolder(t, p, nil, "session", fmt.Sprint(pid), minXIDs)
}

// burnXIDs spends n transaction IDs on the primary, so ages grow.
func burnXIDs(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	for range n {
		if _, err := conn.Exec(context.Background(), "SELECT pg_current_xact_id()"); err != nil {
			t.Fatal(err)
		}
	}
}

// A session that opens a REPEATABLE READ transaction and sits holds the
// horizon back: it becomes the holder, its age grows in transaction IDs
// and in seconds, and when it commits the horizon moves on.
func TestSittingSnapshotHoldsTheXminHorizon(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	ctx := context.Background()
	sitter := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	var pid int
	if err := sitter.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := sitter.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM pg_class"); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	writer := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	burnXIDs(t, writer, 50)

	waitSessionHolder(t, p, pid, 50)
	waitValue(t, p, 15*time.Second, XminHorizonAgeXIDs, "", false, ">=", 50)
	waitValue(t, p, 15*time.Second, XminHorizonAgeSeconds, "", false, ">=", 1)

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	burnXIDs(t, writer, 5)
	// The standby's hot_standby_feedback may hold it for a moment: its
	// age stays small, far under the sitter's.
	waitValue(t, p, 15*time.Second, XminHorizonAgeXIDs, "", false, "<=", 40)
	pgtest.Eventually(t, 15*time.Second, func() error {
		if h, err := holder(t, p); err == nil && h.Labels[LabelHolderKind] == "session" && strings.HasPrefix(h.Labels[LabelHolder], fmt.Sprint(pid)) {
			return fmt.Errorf("session %d still holds the horizon after its commit", pid)
		}
		return nil
	})
}

// A logical slot nobody consumes (a CDC consumer that stopped) retains
// every byte of WAL written after it, and holds the catalog horizon; when
// it is dropped both go.
func TestUnconsumedLogicalSlotRetainsWAL(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	const slot = "stopped_cdc"
	if _, err := admin.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot) })
	if _, err := admin.Exec(ctx, `CREATE TABLE IF NOT EXISTS slot_churn (id int, pad text);
		INSERT INTO slot_churn SELECT g, repeat('x', 500) FROM generate_series(1, 20000) g; DROP TABLE slot_churn`); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{LabelSlot: slot, LabelSlotType: "logical", LabelWALStatus: "reserved"}
	pgtest.Eventually(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Tick(ctx)
		s, ok := p.Snapshot().Get(SlotRetainedBytes, labels)
		if !ok || s.Err != nil || s.Value < 8<<20 {
			return fmt.Errorf("slot sample %+v (found %v); want at least 8 MiB retained", s, ok)
		}
		return nil
	})
	waitValue(t, p, 15*time.Second, SlotRetainedBytesMax, "", false, ">=", 8<<20)
	pgtest.Eventually(t, 15*time.Second, func() error {
		h, err := holder(t, p)
		if err != nil {
			return err
		}
		burnXIDs(t, admin, 5)
		if h.Labels[LabelHolderKind] != "slot" || h.Labels[LabelHolder] != slot {
			return fmt.Errorf("holder %v; want the slot %s (its catalog_xmin)", h.Labels, slot)
		}
		return nil
	})

	if _, err := admin.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Tick(ctx)
		if s, ok := p.Snapshot().Get(SlotRetainedBytes, labels); ok {
			return fmt.Errorf("the dropped slot still reads %v", s.Value)
		}
		return nil
	})
}

// Wraparound headroom reads the oldest database's age over
// autovacuum_freeze_max_age: a small fraction on a young cluster, and
// failed, never 0, when the primary cannot be read.
func TestWraparoundFractionOnAYoungCluster(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	s := tick(t, p, WraparoundFraction, "")
	if s.Err != nil || s.Value <= 0 || s.Value > 0.01 {
		t.Fatalf("wraparound_fraction %v (%v) on a young cluster; want a small positive fraction", s.Value, s.Err)
	}
}

// A session idle in transaction after a write under READ COMMITTED has no
// snapshot between statements, but its transaction ID holds the horizon
// all the same: it is the holder.
func TestIdleInTransactionWriterHoldsTheXminHorizon(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	ctx := context.Background()
	idle := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	var pid int
	if err := idle.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Exec(ctx, "CREATE TABLE IF NOT EXISTS idle_writer (x int)"); err != nil {
		t.Fatal(err)
	}
	tx, err := idle.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO idle_writer VALUES (1)"); err != nil { // takes a transaction ID, then sits
		t.Fatal(err)
	}
	writer := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	burnXIDs(t, writer, 50)
	waitSessionHolder(t, p, pid, 50)
}

// waitHolder polls until the horizon's holder is of kind and its name
// starts with name, at least minXIDs old, while writer (when not nil)
// spends transaction IDs, or fails the test.
func waitHolder(t *testing.T, p *Poller, writer *pgx.Conn, kind, name string, minXIDs float64) {
	t.Helper()
	pgtest.Eventually(t, 20*time.Second, func() error {
		if writer != nil {
			burnXIDs(t, writer, 5)
		}
		h, err := holder(t, p)
		if err != nil {
			return err
		}
		if h.Labels[LabelHolderKind] != kind || !strings.HasPrefix(h.Labels[LabelHolder], name) || h.Value < minXIDs {
			return fmt.Errorf("holder %v at %v xids; want %s %s at %v or more", h.Labels, h.Value, kind, name, minXIDs)
		}
		return nil
	})
}

// A prepared transaction nobody commits holds the horizon, named by its
// gid, until it is rolled back.
func TestPreparedTransactionHoldsTheXminHorizon(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	ctx := context.Background()
	admin := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	for _, q := range []string{"CREATE TABLE IF NOT EXISTS prepared_writer (x int)", "BEGIN", "INSERT INTO prepared_writer VALUES (1)", "PREPARE TRANSACTION 'forgotten_2pc'"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "ROLLBACK PREPARED 'forgotten_2pc'") })
	writer := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	waitHolder(t, p, writer, "prepared", "forgotten_2pc", 20)
	if _, err := admin.Exec(ctx, "ROLLBACK PREPARED 'forgotten_2pc'"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 15*time.Second, func() error {
		h, err := holder(t, p)
		if err != nil {
			return err
		}
		if h.Labels[LabelHolderKind] == "prepared" {
			return fmt.Errorf("the rolled-back prepared transaction still holds: %v", h.Labels)
		}
		return nil
	})
}

// A snapshot held on the replica reaches the primary through
// hot_standby_feedback: the replica's physical slot (the primary keeps a
// slot's feedback in the slot's xmin; a standby without one shows as kind
// standby, from pg_stat_replication.backend_xmin) holds the horizon,
// named replica1, until the snapshot ends.
func TestStandbyFeedbackHoldsTheXminHorizon(t *testing.T) {
	c := pgtest.Cluster(t)
	p := newPoller(t, c, nil)
	ctx := context.Background()
	reader := pgtest.Connect(t, c.Replica, pgcluster.RoleAdmin)
	tx, err := reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM pg_class"); err != nil { // takes the snapshot on the replica
		t.Fatal(err)
	}
	writer := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	// The feedback comes every second (wal_receiver_status_interval) and
	// the writer spends about 100 IDs a second, so even a standby with no
	// snapshot trails by up to a couple of hundred: the snapshot's hold is
	// told from that by its size.
	waitHolder(t, p, writer, "slot", pgcluster.ReplicaName, 600)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		burnXIDs(t, writer, 5)
		h, err := holder(t, p)
		if err != nil {
			return err
		}
		if h.Labels[LabelHolder] == pgcluster.ReplicaName && h.Value >= 300 {
			return fmt.Errorf("the standby still holds %v xids back after its snapshot ended: %v", h.Value, h.Labels)
		}
		return nil
	})
}
