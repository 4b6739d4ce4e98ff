package sidecar

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/throttled/throttled/internal/coord/store"
)

// durable.go: the tokens out, kept in throttled.grants beside the
// sidecar's memory, so a sidecar restarted with tokens out (a deploy, a
// crash) takes their in-flight slots again before it serves a new token,
// and accepts and counts their reports. A sidecar knows its own tokens by
// its owner name: its host and listen address, the same across a restart.

// grantQueryTimeout bounds each statement on throttled.grants, the wait
// for a turn included.
const grantQueryTimeout = time.Second

// grantConns is how many statements on throttled.grants run at once. They
// share the coordination pool with the heartbeats, the leader's
// publications and the reads of the holds: a burst of acquires and
// reports must leave those their connections, or every worker's lease
// lapses and the holds go unconfirmed. A statement that finds no turn
// within grantQueryTimeout fails as the database would (503, retry).
const grantConns = 2

// grantTurn waits for a turn to run a statement on throttled.grants until
// ctx ends, and returns its release.
func (s *Server) grantTurn(ctx context.Context) (func(), error) {
	select {
	case s.grantSem <- struct{}{}:
		return func() { <-s.grantSem }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no turn on %s within %s: %w", store.GrantsTable, grantQueryTimeout, ctx.Err())
	}
}

// grantOwner is the name this sidecar's tokens are kept under.
func grantOwner(listen string) string {
	host, _ := os.Hostname()
	return host + " " + listen
}

// recordGrant keeps token id in the database before it is handed out.
func (s *Server) recordGrant(ctx context.Context, id string, g *grant) error {
	ctx, cancel := context.WithTimeout(ctx, grantQueryTimeout)
	defer cancel()
	release, err := s.grantTurn(ctx)
	if err != nil {
		return &grantDBError{fmt.Errorf("sidecar: cannot record the token: %w", err)}
	}
	defer release()
	err = s.grantDB.AddGrant(ctx, store.Grant{ID: id, Job: g.job, Owner: s.owner, Worker: g.worker, MaxBatch: g.maxBatch}, s.book.ttl)
	if err != nil {
		return &grantDBError{fmt.Errorf("sidecar: cannot record the token in %s: %w", store.GrantsTable, err)}
	}
	return nil
}

// grantDBError is a statement on throttled.grants that failed: the acquire
// answers 503, to be retried, not 429.
type grantDBError struct{ err error }

func (e *grantDBError) Error() string { return e.err.Error() }
func (e *grantDBError) Unwrap() error { return e.err }

// endGrant marks token id ended in the database. A failure is logged: the
// row stays open until its expiry, and a restarted sidecar would hold its
// slot until then (closed, never open).
func (s *Server) endGrant(id, job string, how store.GrantEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), grantQueryTimeout)
	defer cancel()
	release, err := s.grantTurn(ctx)
	if err == nil {
		defer release()
		_, err = s.grantDB.EndGrant(ctx, id, how)
	}
	if err != nil {
		s.log.Warn("cannot end a token's row; a restarted sidecar holds its slot until it expires", "job", job, "ended", string(how), "error", err)
	}
}

// adopt takes up job's tokens that a previous run of this sidecar handed
// out and that are still out, once per job and run: they hold slots again
// (acquire seats them before any new token) and their reports are
// accepted. It fails closed: an error means no token may be served.
func (s *Server) adopt(ctx context.Context, job string) error {
	s.amu.Lock()
	defer s.amu.Unlock()
	if s.adopted[job] {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, grantQueryTimeout)
	defer cancel()
	release, err := s.grantTurn(ctx)
	if err != nil {
		return fmt.Errorf("sidecar: cannot read the tokens out before this sidecar started: %w", err)
	}
	open, err := s.grantDB.OpenGrants(ctx, s.owner, job)
	release()
	if err != nil {
		return fmt.Errorf("sidecar: cannot read the tokens out before this sidecar started, from %s: %w", store.GrantsTable, err)
	}
	now := time.Now()
	n := 0
	for _, g := range open {
		if s.book.has(g.ID) {
			continue
		}
		s.book.add(g.ID, &grant{job: job, at: now, expires: now.Add(g.Expires), worker: g.Worker, maxBatch: g.MaxBatch})
		n++
	}
	if n > 0 {
		s.log.Warn("tokens out before this sidecar started hold their slots until reported or expired", "job", job, "tokens", n)
	}
	s.adopted[job] = true
	return nil
}
