package signals

import (
	"errors"
	"testing"
	"time"
)

func TestVacuumSamplesCountPerTableAndWraparoundAnywhere(t *testing.T) {
	at := time.Unix(100, 0)
	rows := []vacuumRow{
		{table: "public.events", here: true},
		{table: "public.events", here: true, wraparound: true},
		{table: "app.orders", here: true},
		{table: "public.other_db_table", here: false, wraparound: true},
	}
	snap := Snapshot{At: at, MaxAge: time.Second, Samples: vacuumSamples(rows, at)}
	for table, want := range map[string]float64{"public.events": 2, "app.orders": 1, "public.idle": 0, "public.other_db_table": 0} {
		s, ok := VacuumOn(snap, table)
		if !ok || s.Err != nil || s.Value != want || !s.At.Equal(at) {
			t.Errorf("VacuumOn(%s) = %+v, %v; want %v at %v", table, s, ok, want, at)
		}
	}
	if s, _ := snap.Get(VacuumRunningTables, nil); s.Value != 2 {
		t.Errorf("vacuum_running_tables = %v, want 2", s.Value)
	}
	if s, _ := snap.Get(AntiWraparoundVacuums, nil); s.Value != 2 {
		t.Errorf("antiwraparound_vacuums = %v, want 2 (one here, one in another database)", s.Value)
	}
}

// A failed read leaves no table at 0: VacuumOn reports it unknown.
func TestVacuumOnAFailedReadIsUnknown(t *testing.T) {
	at := time.Unix(100, 0)
	boom := errors.New("boom")
	for _, snap := range []Snapshot{
		{At: at, Samples: vacuumFailed(at, boom)},
		{At: at}, // never sampled
	} {
		s, ok := VacuumOn(snap, "public.events")
		if ok {
			t.Errorf("VacuumOn on %v = %+v, true; want unknown", snap.Samples, s)
		}
	}
}

func TestTableNameFoldsAsPostgresDoes(t *testing.T) {
	for in, want := range map[string]string{
		"events":            "public.events",
		"Public.Events":     "public.events",
		`app."Orders"`:      "app.Orders",
		`"my""schema".t`:    `my"schema.t`,
		"archive.events_v2": "archive.events_v2",
	} {
		if got := TableName(in); got != want {
			t.Errorf("TableName(%q) = %q, want %q", in, got, want)
		}
	}
}
