package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/throttled/throttled/internal/coord/store"
	"github.com/throttled/throttled/internal/testenv/pgcluster"
	"github.com/throttled/throttled/internal/testenv/pgtest"
)

// grantsPool is a pool on the pair's primary, closed with the test.
func grantsPool(t *testing.T, c *pgcluster.Cluster) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), c.Primary.DSN(pgcluster.RoleAdmin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// EndGrant says how the token is ended after its statement, and whether
// the statement ended it: a report retried after a lost answer finds its
// own end stored, a report after an expiry finds the expiry, and a token
// not kept is open and not ended.
func TestEndGrantSaysHowTheTokenIsEnded(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	s := store.New(grantsPool(t, c))
	for _, id := range []string{"end-r", "end-x"} {
		if err := s.AddGrant(ctx, store.Grant{ID: id, Job: "a", Owner: "o", Worker: "w"}, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		id        string
		how, want store.GrantEnd
		ended     bool
	}{
		{"end-r", store.GrantReported, store.GrantReported, true},
		{"end-r", store.GrantReported, store.GrantReported, false},
		{"end-r", store.GrantExpired, store.GrantReported, false},
		{"end-x", store.GrantExpired, store.GrantExpired, true},
		{"end-x", store.GrantReported, store.GrantExpired, false},
		{"never", store.GrantReported, store.GrantOpen, false},
	} {
		now, ended, err := s.EndGrant(ctx, tc.id, tc.how)
		if err != nil || now != tc.want || ended != tc.ended {
			t.Errorf("EndGrant(%s, %q) = %q, %v, %v; want %q, %v", tc.id, tc.how, now, ended, err, tc.want, tc.ended)
		}
	}
}

// A token another transaction ends while EndGrant waits for its row is
// not read as open (as if no statement had ended it): EndGrant stores
// nothing and says so (ErrEndedMeanwhile), and asked again it finds the
// other's end.
func TestEndGrantWaitingForTheRowSeesItEndedMeanwhile(t *testing.T) {
	c, admin := setup(t)
	ctx := context.Background()
	s := store.New(grantsPool(t, c))
	if err := s.AddGrant(ctx, store.Grant{ID: "end-m", Job: "a", Owner: "o", Worker: "w"}, time.Minute, time.Hour); err != nil {
		t.Fatal(err)
	}
	other := pgtest.Connect(t, c.Primary, pgcluster.RoleAdmin)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "UPDATE throttled.grants SET ended = 'expired', ended_at = now() WHERE id = 'end-m'"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, _, err := s.EndGrant(ectx, "end-m", store.GrantReported)
		got <- err
	}()
	pgtest.Eventually(t, 10*time.Second, func() error {
		var waiting bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND locktype = 'transactionid')").Scan(&waiting); err != nil {
			return err
		}
		if !waiting {
			return fmt.Errorf("EndGrant is not waiting for the row yet")
		}
		return nil
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, store.ErrEndedMeanwhile) {
		t.Fatalf("EndGrant while another transaction ended the token: %v; want ErrEndedMeanwhile", err)
	}
	if now, ended, err := s.EndGrant(ctx, "end-m", store.GrantReported); err != nil || now != store.GrantExpired || ended {
		t.Errorf("EndGrant again = %q, %v, %v; want expired, not by it", now, ended, err)
	}
}

// A grant removes the tokens whose expiry is more than keep ago, and
// keeps the others, ended or not, for a late report to be told how each
// ended.
func TestAddGrantKeepsTokensForTheirRetention(t *testing.T) {
	c, admin := setup(t)
	ctx := context.Background()
	s := store.New(grantsPool(t, c))
	for _, id := range []string{"kept", "old"} {
		if err := s.AddGrant(ctx, store.Grant{ID: id, Job: "a", Owner: "o", Worker: "w"}, time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.EndGrant(ctx, "kept", store.GrantExpired); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `UPDATE throttled.grants SET expires_at = now() - interval '59 minutes' WHERE id = 'kept';
		UPDATE throttled.grants SET expires_at = now() - interval '61 minutes' WHERE id = 'old'`); err != nil {
		t.Fatal(err)
	}
	if err := s.AddGrant(ctx, store.Grant{ID: "new", Job: "a", Owner: "o", Worker: "w"}, time.Minute, time.Hour); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"kept": true, "old": false, "new": true} {
		_, end, ok, err := s.LookupGrant(ctx, id)
		if err != nil || ok != want {
			t.Errorf("token %s kept = %v (%v); want %v", id, ok, err, want)
		}
		if id == "kept" && end != store.GrantExpired {
			t.Errorf("token kept ended %q; want expired", end)
		}
	}
}

// An owner's claim is one live session's: a second session cannot take
// it, OwnerFree says it is held, and when the holder gives it up (or its
// session ends) the next one takes it.
func TestOwnerClaimIsOneSessions(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	pool := grantsPool(t, c)
	open := func() *store.OwnerSession {
		t.Helper()
		o, err := store.OpenOwnerSession(ctx, pool, "sidecar-0", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { o.Close(context.Background()) })
		return o
	}
	claim := func(o *store.OwnerSession) bool {
		t.Helper()
		got, err := o.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	free := func(owner string) bool {
		t.Helper()
		free, err := store.New(pool).OwnerFree(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		return free
	}
	first, second := open(), open()
	if !free("sidecar-0") || !claim(first) {
		t.Fatal("a free owner name could not be claimed")
	}
	if claim(second) || free("sidecar-0") {
		t.Fatal("a second session claimed an owner name the first holds, or it reads free")
	}
	if !free("sidecar-1") {
		t.Error("another owner name reads held")
	}
	first.Close(ctx)
	if !first.Closed() {
		t.Error("a closed session reads open")
	}
	pgtest.Eventually(t, 5*time.Second, func() error {
		if !claim(second) {
			return fmt.Errorf("the owner name is still held after its holder gave it up")
		}
		return nil
	})
	if free("sidecar-0") {
		t.Error("the owner name reads free while the second session holds it")
	}
}
