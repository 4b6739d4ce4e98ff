package store_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/throttled/throttled/internal/coord/store"
)

// A binding goes into the database as its signal's name and its sample's
// labels apart, and every read gives both back as they went in: the
// worker's lease, the critical pause a new leader takes over, and the
// leader's publication for people. A binding without labels reads back
// with none, and its labels column holds an empty object, never null.
func TestBindingKeepsItsSignalAndLabelsApart(t *testing.T) {
	_, admin := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := store.New(admin)
	if _, err := admin.Exec(ctx, "DELETE FROM throttled.workers"); err != nil {
		t.Fatal(err)
	}
	if err := s.Upsert(ctx, store.Worker{ID: "binding-test/1", Job: "purge", Weight: 1}); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	lag := store.Binding{Signal: "replica_lag_seconds", Labels: map[string]string{"replica": `r"1,x=y`}}
	load := store.Binding{Signal: "primary_load"}
	for _, tc := range []struct {
		name              string
		binding, critical store.Binding
	}{
		{"labelled", lag, lag},
		{"unlabelled", load, load},
		{"labelled binding, unlabelled critical", lag, load},
	} {
		pub := store.Publication{Leader: "proc-a", Budget: 2, Mode: "throttled", Binding: tc.binding, Reason: "cut", Lease: time.Minute,
			Critical: store.Critical{Signal: tc.critical, Since: &since, Latched: true, PauseBudget: 3},
			Workers:  []store.WorkerLease{{ID: "binding-test/1", Rate: 1, Burst: 1, InFlight: 1, State: "throttled", Code: "cut", Reason: "cut"}}}
		if err := s.Publish(ctx, pub); err != nil {
			t.Fatalf("%s: publish: %v", tc.name, err)
		}
		lease, err := s.Beat(ctx, "binding-test/1", store.Counters{})
		if err != nil {
			t.Fatalf("%s: beat: %v", tc.name, err)
		}
		last, err := s.LastLeader(ctx)
		if err != nil {
			t.Fatalf("%s: last leader: %v", tc.name, err)
		}
		leader, ok, _, err := s.Status(ctx, time.Minute)
		if err != nil || !ok {
			t.Fatalf("%s: status: %v, %v", tc.name, ok, err)
		}
		for what, got := range map[string]store.Binding{"lease": lease.Binding, "leader": leader.Binding} {
			if !same(got, tc.binding) {
				t.Errorf("%s: %s binding %+v; want %+v", tc.name, what, got, tc.binding)
			}
		}
		if !same(last.Signal, tc.critical) {
			t.Errorf("%s: critical signal %+v; want %+v", tc.name, last.Signal, tc.critical)
		}
		var nulls int
		if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM throttled.leader WHERE jsonb_typeof(binding_labels) <> 'object' OR jsonb_typeof(critical_labels) <> 'object')
			+ (SELECT count(*) FROM throttled.workers WHERE jsonb_typeof(binding_labels) <> 'object')`).Scan(&nulls); err != nil || nulls != 0 {
			t.Errorf("%s: %d labels columns not an object (%v)", tc.name, nulls, err)
		}
	}
}

// same reports whether a and b are one binding: nil and empty labels are
// the same.
func same(a, b store.Binding) bool {
	return a.Signal == b.Signal && maps.Equal(a.Labels, b.Labels)
}
