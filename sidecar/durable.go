package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/internal/coord/store"
)

// durable.go: the tokens out, kept in throttled.grants beside the
// sidecar's memory, so a sidecar restarted with tokens out (a deploy, a
// crash) takes their in-flight slots again before it serves a new token,
// and accepts and counts their reports. A sidecar knows its own tokens by
// its owner name (grantOwner): its configured id, else its host and the
// socket it listens on, the same across a restart however the address is
// written. Run claims the name while the sidecar serves, so a second live
// sidecar under the same name neither serves tokens under it nor takes
// the first one's up.

// grantQueryTimeout bounds each statement on throttled.grants, the wait
// for a turn included.
const grantQueryTimeout = time.Second

// grantKept is how long throttled.grants keeps a token past its expiry,
// however it ended: within it, a report of the token is answered 409
// (reported) or 410 (expired) however late; past it, the token is
// forgotten (404). An hour of tokens is a few thousand rows at the rates
// a job's budget allows.
const grantKept = time.Hour

// grantConns is how many statements on throttled.grants run at once. They
// share the coordination pool with the heartbeats, the leader's
// publications and the reads of the holds: a burst of acquires and
// reports must leave those their connections, or every worker's lease
// lapses and the holds go unconfirmed. A statement that finds no turn
// within grantQueryTimeout fails as the database would (503, retry).
const grantConns = 2

// The claim on the owner name: Run's session is ended by the server
// claimLease after its last statement (so a frozen or cut-off sidecar
// loses its claim that long after), and Run uses it every claimEvery.
const (
	claimLease = 3 * time.Second
	claimEvery = time.Second
)

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

// grantOwner is the name this sidecar's tokens are kept under: its
// configured id (listen { id }), else its host name and the socket its
// listen address binds (boundSocket).
func grantOwner(cfg *config.Config) (string, error) {
	if cfg.SidecarID != "" {
		return cfg.SidecarID, nil
	}
	sock, err := boundSocket(cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("sidecar: listen address %q: %w", cfg.Listen, err)
	}
	host, _ := os.Hostname()
	return host + " " + sock, nil
}

// boundSocket writes the socket a listen address binds one way: a host
// name resolved to the address net.Listen binds (its first IPv4 address,
// else its first), an IPv4-mapped address as IPv4, and every interface
// (no host, 0.0.0.0 or ::, which net.Listen binds alike) as ":port". So
// localhost:18087 and 127.0.0.1:18087 are one socket. "" stays "" (a
// Server with no listen address, in a test).
func boundSocket(address string) (string, error) {
	if address == "" {
		return "", nil
	}
	a, err := net.ResolveTCPAddr("tcp", address)
	if err != nil {
		return "", err
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok || ip.Unmap().IsUnspecified() {
		return ":" + strconv.Itoa(a.Port), nil
	}
	return netip.AddrPortFrom(ip.Unmap().WithZone(a.Zone), uint16(a.Port)).String(), nil
}

// ownerClaim is what this sidecar knows of its claim on its owner name.
// Its zero value is a sidecar whose Run never ran: it claims nothing, and
// takes tokens up only while no live sidecar claims the name.
type ownerClaim struct {
	mu sync.Mutex
	// kept: Run keeps (or kept) the claim, so tokens are served only
	// while held; why says why not, while not held.
	kept, held bool
	why        string
}

// state returns the claim as it is now.
func (c *ownerClaim) state() (kept, held bool, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kept, c.held, c.why
}

// set records the claim held or not (and why not), and reports whether
// that changed.
func (c *ownerClaim) set(held bool, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := c.held != held || c.why != why
	c.held, c.why = held, why
	return changed
}

// Run keeps this sidecar's claim on its owner name (listen { id }, else
// its host and socket) until ctx ends, then gives it up, and returns nil.
// The claim is a session advisory lock on a connection of its own, used
// every second; the server ends the session 3 s after its last statement
// (idle_session_timeout, PostgreSQL 14 and later), so a sidecar that
// dies, freezes or is cut off loses it then, and at once when its
// connection closes. While Run runs, the sidecar grants tokens and takes
// up those a previous run left out only while it holds the claim: a
// second live sidecar under the same name answers acquires with 503 and
// never takes the first one's tokens. A Server whose Run never ran takes
// tokens up only while no session holds the claim. Run it once, before
// serving the Handler.
func (s *Server) Run(ctx context.Context) error {
	s.claim.mu.Lock()
	if s.claim.kept {
		s.claim.mu.Unlock()
		return errors.New("sidecar: Run called twice")
	}
	s.claim.kept, s.claim.why = true, fmt.Sprintf("this sidecar has not claimed its owner name %q yet", s.owner)
	s.claim.mu.Unlock()
	var session *store.OwnerSession
	idleWarned := false
	defer func() {
		if session != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			session.Close(cctx)
			cancel()
		}
		s.claim.set(false, fmt.Sprintf("this sidecar gave its owner name %q up: it is stopping", s.owner))
	}()
	tick := time.NewTicker(claimEvery)
	defer tick.Stop()
	for {
		session = s.keepClaim(ctx, session, &idleWarned)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// keepClaim is one beat of Run: it opens a session if it has none, keeps
// the claim it holds, or tries to take it. It returns the session to use
// at the next beat, nil when there is none.
func (s *Server) keepClaim(ctx context.Context, o *store.OwnerSession, idleWarned *bool) *store.OwnerSession {
	cctx, cancel := context.WithTimeout(ctx, claimEvery)
	defer cancel()
	drop := func(why string) *store.OwnerSession {
		if ctx.Err() != nil {
			return o // stopping: Run gives the claim up
		}
		if o != nil {
			o.Close(cctx)
		}
		if s.claim.set(false, why) {
			s.log.Warn("this sidecar does not hold its owner name: it serves no token", "owner", s.owner, "why", why)
		}
		return nil
	}
	if o != nil && o.Closed() {
		return drop("its claim's session ended")
	}
	if o == nil {
		var err error
		o, err = store.OpenOwnerSession(cctx, s.db.Pool(), s.owner, claimLease)
		switch {
		case err == nil:
		case o != nil && store.NoIdleTimeout(err):
			if !*idleWarned {
				s.log.Warn("the server cannot end a frozen sidecar's session (idle_session_timeout, PostgreSQL 14 and later): a sidecar that freezes keeps its owner name until its connection ends", "error", err)
			}
			*idleWarned = true
		default:
			return drop("cannot open a session to claim it: " + err.Error())
		}
	}
	if _, held, _ := s.claim.state(); held {
		if err := o.Ping(cctx); err != nil {
			return drop("its claim's session was lost: " + err.Error())
		}
		return o
	}
	got, err := o.Claim(cctx)
	switch {
	case err != nil:
		return drop("cannot claim it: " + err.Error())
	case got:
		if s.claim.set(true, "") {
			s.log.Info("this sidecar holds its owner name", "owner", s.owner)
		}
	default:
		why := fmt.Sprintf("another live sidecar holds the owner name %q; give each sidecar its own listen id", s.owner)
		if s.claim.set(false, why) {
			s.log.Error("another live sidecar holds this sidecar's owner name: this one serves no token until it is free", "owner", s.owner)
		}
	}
	return o
}

// mayGrant refuses a new token while Run keeps the claim and does not
// hold it: the name is another live sidecar's, or not claimed yet.
func (s *Server) mayGrant() error {
	if kept, held, why := s.claim.state(); kept && !held {
		return &grantDBError{fmt.Errorf("sidecar: serves no token now: %s", why)}
	}
	return nil
}

// recordGrant keeps token id in the database before it is handed out.
func (s *Server) recordGrant(ctx context.Context, id string, g *grant) error {
	if err := s.mayGrant(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, grantQueryTimeout)
	defer cancel()
	release, err := s.grantTurn(ctx)
	if err != nil {
		return &grantDBError{fmt.Errorf("sidecar: cannot record the token: %w", err)}
	}
	defer release()
	err = s.grantDB.AddGrant(ctx, store.Grant{ID: id, Job: g.job, Owner: s.owner, Worker: g.worker, MaxBatch: g.maxBatch}, s.book.ttl, grantKept)
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

// storeReported ends token id as reported in the database, and returns
// how the table has it ended now and whether this statement ended it
// (store.EndGrant). ran is false when a failure surely stored nothing:
// the statement never ran (no turn), or found the token ended meanwhile.
func (s *Server) storeReported(ctx context.Context, id string) (now store.GrantEnd, ended, ran bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, grantQueryTimeout)
	defer cancel()
	release, err := s.grantTurn(ctx)
	if err != nil {
		return store.GrantOpen, false, false, err
	}
	defer release()
	now, ended, err = s.grantDB.EndGrant(ctx, id, store.GrantReported)
	if err != nil {
		// Ended meanwhile by another statement: this one stored nothing.
		return store.GrantOpen, false, !errors.Is(err, store.ErrEndedMeanwhile), err
	}
	return now, ended, true, nil
}

// endGrant marks token id ended as how in the database: the expiry, which
// is never retried. A failure is logged: the row stays open, and a
// restarted sidecar, or a late report, finds it expired at its expiry, as
// this one did.
func (s *Server) endGrant(id, job string, how store.GrantEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), grantQueryTimeout)
	defer cancel()
	release, err := s.grantTurn(ctx)
	if err == nil {
		defer release()
		_, _, err = s.grantDB.EndGrant(ctx, id, how)
	}
	if err != nil {
		s.log.Warn("cannot end a token's row; a restarted sidecar holds its slot until it expires", "job", job, "ended", string(how), "error", err)
	}
}

// adopt takes up job's tokens that a previous run of this sidecar handed
// out and that are still out, once per job and run: they hold slots again
// (acquire seats them before any new token) and their reports are
// accepted. Only a sidecar that holds its owner name's claim takes them
// up (or, without Run, one that finds no session holding it), never a
// second live sidecar under the same name. It fails closed: an error
// means no token may be served.
func (s *Server) adopt(ctx context.Context, job string) error {
	s.amu.Lock()
	defer s.amu.Unlock()
	if s.adopted[job] {
		return nil
	}
	if err := s.mayGrant(); err != nil {
		return err
	}
	kept, _, _ := s.claim.state()
	ctx, cancel := context.WithTimeout(ctx, grantQueryTimeout)
	defer cancel()
	release, err := s.grantTurn(ctx)
	if err != nil {
		return fmt.Errorf("sidecar: cannot read the tokens out before this sidecar started: %w", err)
	}
	if !kept {
		free, err := s.grantDB.OwnerFree(ctx, s.owner)
		if err == nil && !free {
			err = fmt.Errorf("another live sidecar holds the owner name %q", s.owner)
		}
		if err != nil {
			release()
			return fmt.Errorf("sidecar: takes up no token out before it started: %w", err)
		}
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
