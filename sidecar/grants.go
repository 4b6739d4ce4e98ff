package sidecar

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// grants.go: the tokens remote workers hold, in memory: each expires on
// its own timer, when its time comes, not at the next acquire, and is
// counted then as a failed batch; an ended token is remembered for a TTL
// more, so a late report is told it expired and a second one that it was
// reported (later ones, throttled.grants tells). The database keeps the
// same tokens for a sidecar restarted with tokens out: see durable.go. A
// report ends its token in two steps, begin and then finish once its end
// is stored (or abandon when it could not be): the token stays out
// between, so a report the database could not take is retried and found.

// errTokenExpired is the outcome the controller hears for a token that
// went unreported past its TTL.
var errTokenExpired = errors.New("token not reported within the grant TTL")

// grant is a token a remote worker holds: its in-flight slot stays taken
// until the worker reports, or the grant expires.
type grant struct {
	job string
	at  time.Time
	// expires is when the token expires: at + the TTL, or, for a token
	// granted before a restart, what the database says.
	expires time.Time
	// worker names who holds it, for the job's reason; maxBatch is the
	// job's max_batch_size when it was granted (0: none), which bounds
	// the rows its report may claim.
	worker   string
	maxBatch int
	// done frees the token's slot and reports its batch; nil for a token
	// granted before a restart whose slot is not taken yet.
	done  func(rows int64, took time.Duration, err error)
	timer *time.Timer
	// reporting: a report of the token is storing its end (under the
	// book's lock); expireDue: its expiry came meanwhile, and is carried
	// out if the report is abandoned; tried: a report's statement ran
	// and failed, so it may have stored the end all the same.
	reporting, expireDue, tried bool
}

// tokenEnd is what became of a token, as a report finds it.
type tokenEnd int

const (
	tokenUnknown  tokenEnd = iota // never granted here, or forgotten
	tokenOut                      // out: the report takes it
	tokenReported                 // reported already
	tokenExpired                  // expired, counted as a failed batch
	tokenBusy                     // out, and a report of it is storing its end
)

// ended is a token that ended, remembered for a TTL.
type ended struct {
	job string
	how tokenEnd
	at  time.Time
}

// grantBook holds the tokens out and those ended lately. It is safe for
// concurrent use; the zero value is not: use newGrantBook.
type grantBook struct {
	ttl time.Duration
	// expired, when set, hears each token that expired, after its batch
	// was reported failed (the sidecar ends its row); it may block.
	expired func(id string, g *grant)

	mu    sync.Mutex
	live  map[string]*grant
	ended map[string]ended
}

func newGrantBook(ttl time.Duration, expired func(string, *grant)) *grantBook {
	return &grantBook{ttl: ttl, expired: expired, live: map[string]*grant{}, ended: map[string]ended{}}
}

// add keeps g under id and arms its expiry at g.expires (g.at + the TTL
// when unset).
func (b *grantBook) add(id string, g *grant) {
	if g.expires.IsZero() {
		g.expires = g.at.Add(b.ttl)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.live[id]; ok {
		return
	}
	b.live[id] = g
	g.timer = time.AfterFunc(time.Until(g.expires), func() { b.expire(id) })
}

// expire ends token id as expired if it is still out: its slot is freed
// and its batch counted as failed, now, whoever else is waiting. A token
// whose report is storing its end expires only if the report is
// abandoned.
func (b *grantBook) expire(id string) {
	b.mu.Lock()
	g, ok := b.live[id]
	if ok && g.reporting {
		g.expireDue, ok = true, false
	} else if ok {
		delete(b.live, id)
		b.endLocked(id, g.job, tokenExpired)
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	if g.done != nil {
		g.done(0, g.expires.Sub(g.at), errTokenExpired)
	}
	if b.expired != nil {
		b.expired(id, g)
	}
}

// endLocked remembers id ended, and forgets tokens ended a TTL ago.
func (b *grantBook) endLocked(id, job string, how tokenEnd) {
	now := time.Now()
	for k, e := range b.ended {
		if now.Sub(e.at) > b.ttl {
			delete(b.ended, k)
		}
	}
	b.ended[id] = ended{job: job, how: how, at: now}
}

// begin starts a report of token id of job, if it is out, no other
// report of it is storing its end, and check accepts it (a refusal leaves
// it as it was), and returns it; otherwise it says what became of it. The
// token stays out until finish or abandon.
func (b *grantBook) begin(id, job string, check func(*grant) error) (*grant, tokenEnd, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g, ok := b.live[id]; ok && g.job == job {
		if g.reporting {
			return nil, tokenBusy, nil
		}
		if err := check(g); err != nil {
			return nil, tokenOut, err
		}
		g.reporting = true
		return g, tokenOut, nil
	}
	if e, ok := b.ended[id]; ok && e.job == job {
		return nil, e.how, nil
	}
	return nil, tokenUnknown, nil
}

// finish ends token id, whose report began, as how (reported, or
// expired when the database says so): its timer stops and it is
// remembered ended.
func (b *grantBook) finish(id string, how tokenEnd) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.live[id]
	if !ok {
		return
	}
	g.timer.Stop()
	delete(b.live, id)
	b.endLocked(id, g.job, how)
}

// abandon leaves token id out after its report could not store its end,
// for the worker's retry to find; ran says the report's statement ran, so
// the end may be stored after all. A token whose expiry came meanwhile
// expires now.
func (b *grantBook) abandon(id string, ran bool) {
	b.mu.Lock()
	g, ok := b.live[id]
	due := false
	if ok {
		g.reporting = false
		g.tried = g.tried || ran
		due = g.expireDue || !time.Now().Before(g.expires)
	}
	b.mu.Unlock()
	if due {
		b.expire(id)
	}
}

// has reports whether token id is out.
func (b *grantBook) has(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.live[id]
	return ok
}

// out is how many tokens are out.
func (b *grantBook) out() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.live)
}

// slotless lists job's tokens granted before a restart whose slots are
// not taken yet, the oldest first.
func (b *grantBook) slotless(job string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id, g := range b.live {
		if g.job == job && g.done == nil {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(x, y string) int { return cmp.Or(b.live[x].at.Compare(b.live[y].at), strings.Compare(x, y)) })
	return ids
}

// seat gives token id the slot done holds; false, and the slot left to
// the caller, when the token ended meanwhile.
func (b *grantBook) seat(id string, done func(int64, time.Duration, error)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.live[id]
	if !ok || g.done != nil {
		return false
	}
	g.done = done
	return true
}

// stale reports whether a token of job has gone unreported past after.
func (b *grantBook) stale(job string, now time.Time, after time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, g := range b.live {
		if g.job == job && now.Sub(g.at) > after {
			return true
		}
	}
	return false
}

// reason says which tokens of job are out at now, by worker, the oldest
// first: "waiting for 1 unreported grant from worker w1 (acquired 42s
// ago, expires in 4m18s)"; "" when none is.
func (b *grantBook) reason(job string, now time.Time) string {
	type held struct {
		worker string
		n      int
		oldest *grant
	}
	b.mu.Lock()
	var by []*held
	total := 0
	for _, g := range b.live {
		if g.job != job {
			continue
		}
		total++
		i := slices.IndexFunc(by, func(h *held) bool { return h.worker == g.worker })
		if i < 0 {
			by = append(by, &held{worker: g.worker, oldest: g})
			i = len(by) - 1
		}
		by[i].n++
		if g.at.Before(by[i].oldest.at) {
			by[i].oldest = g
		}
	}
	b.mu.Unlock()
	if total == 0 {
		return ""
	}
	slices.SortFunc(by, func(a, b *held) int {
		return cmp.Or(a.oldest.at.Compare(b.oldest.at), strings.Compare(a.worker, b.worker))
	})
	ages := func(h *held) string {
		return fmt.Sprintf("acquired %s ago, expires in %s", now.Sub(h.oldest.at).Round(time.Second), h.oldest.expires.Sub(now).Round(time.Second))
	}
	plural := func(n int) string {
		if n == 1 {
			return "1 unreported grant"
		}
		return fmt.Sprintf("%d unreported grants", n)
	}
	if len(by) == 1 {
		h := by[0]
		if h.n > 1 {
			return fmt.Sprintf("waiting for %s from worker %s (the oldest %s)", plural(h.n), h.worker, ages(h))
		}
		return fmt.Sprintf("waiting for %s from worker %s (%s)", plural(h.n), h.worker, ages(h))
	}
	parts := make([]string, 0, 4)
	shown := 0
	for i, h := range by {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more from %d other workers", total-shown, len(by)-3))
			break
		}
		shown += h.n
		parts = append(parts, fmt.Sprintf("%d from worker %s (the oldest %s)", h.n, h.worker, ages(h)))
	}
	return fmt.Sprintf("waiting for %s: %s", plural(total), strings.Join(parts, ", "))
}
