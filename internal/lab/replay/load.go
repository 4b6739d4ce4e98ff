package replay

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// request is one foreground transaction, scheduled at a time on the
// generator's clock.
type request struct {
	at time.Time
	// sent is when the generator put the request on the queue: sent-at
	// is its own lateness behind the schedule (its timer and its
	// goroutine waiting for this process's CPU).
	sent     time.Time
	readOnly bool
	aid, tid int
	bid      int
	delta    int
}

// generator is the open-loop foreground load: arrivals come as a Poisson
// stream at rate (times the surge multiplier) whatever the server does;
// a transaction that waits for a connection waits in the queue, and its
// latency counts from its scheduled start.
type generator struct {
	pool     *pgxpool.Pool
	scale    int
	readOnly float64 // share of read-only transactions
	workers  int
	// mult is the surge multiplier, as float64 bits.
	mult atomic.Uint64
	// small makes each read-write transaction one insert and its commit
	// (a write-heavy foreground) instead of the TPC-B-like five.
	small bool
}

func newGenerator(pool *pgxpool.Pool, scale int, readOnly float64, workers int) *generator {
	g := &generator{pool: pool, scale: scale, readOnly: readOnly, workers: workers}
	g.setMultiplier(1)
	return g
}

// setMultiplier scales the arrival rate from now on (a surge).
func (g *generator) setMultiplier(m float64) { g.mult.Store(math.Float64bits(m)) }

func (g *generator) multiplier() float64 { return math.Float64frombits(g.mult.Load()) }

// drainGrace bounds how long transactions scheduled inside a run may
// finish after it; those still queued then count as failed.
const drainGrace = 5 * time.Second

// run schedules arrivals at rate per second from start for d, executes
// them on the generator's workers, and records each into rec. It returns
// once every scheduled transaction has finished or failed.
func (g *generator) run(ctx context.Context, rate float64, start time.Time, d time.Duration, seed uint64, rec *recorder) {
	queue := make(chan request, 1<<16)
	end := start.Add(d)
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end.Add(drainGrace))
	defer cancel()
	var wg sync.WaitGroup
	for range g.workers {
		wg.Go(func() {
			free := start // when this worker last finished
			for r := range queue {
				picked := time.Now()
				if wctx.Err() != nil {
					rec.fail(r.at)
					continue
				}
				err := g.exec(wctx, r)
				done := time.Now()
				rec.recordSplit(r.at, done.Sub(r.at), clientWait(r.at, r.sent, free, picked), err)
				free = done
			}
		})
	}
	rng := rand.New(rand.NewPCG(seed, 0x7e9))
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := start
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / (rate * g.multiplier()) * float64(time.Second)))
		if !next.Before(end) {
			break
		}
		r := request{at: next, readOnly: rng.Float64() < g.readOnly, aid: 1 + rng.IntN(g.scale*accountsPerBranch),
			tid: 1 + rng.IntN(g.scale*tellersPerBranch), bid: 1 + rng.IntN(g.scale), delta: rng.IntN(10001) - 5000}
		if wait := time.Until(next); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		r.sent = time.Now()
		select {
		case queue <- r:
		default:
			rec.fail(r.at) // the queue is full: the server is far behind
		}
	}
	close(queue)
	wg.Wait()
}

// txTimeout bounds one foreground transaction.
const txTimeout = 10 * time.Second

// exec runs one transaction: the read-only share reads one balance; the
// rest is pgbench's TPC-B-like transaction, sent as one pipelined batch
// (one implicit transaction, one round trip).
func (g *generator) exec(ctx context.Context, r request) error {
	ctx, cancel := context.WithTimeout(ctx, txTimeout)
	defer cancel()
	if r.readOnly {
		var bal int
		return g.pool.QueryRow(ctx, "SELECT abalance FROM "+accounts+" WHERE aid = $1", r.aid).Scan(&bal)
	}
	if g.small {
		_, err := g.pool.Exec(ctx, "INSERT INTO "+history+" (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)", r.tid, r.bid, r.aid, r.delta)
		return err
	}
	b := &pgx.Batch{}
	b.Queue("UPDATE "+accounts+" SET abalance = abalance + $1 WHERE aid = $2", r.delta, r.aid)
	b.Queue("SELECT abalance FROM "+accounts+" WHERE aid = $1", r.aid)
	b.Queue("UPDATE "+tellers+" SET tbalance = tbalance + $1 WHERE tid = $2", r.delta, r.tid)
	b.Queue("UPDATE "+branches+" SET bbalance = bbalance + $1 WHERE bid = $2", r.delta, r.bid)
	b.Queue("INSERT INTO "+history+" (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)", r.tid, r.bid, r.aid, r.delta)
	return g.pool.SendBatch(ctx, b).Close()
}

// recorder collects one run's foreground outcomes: every latency into one
// histogram and into one per second of scheduled time, completions per
// second of completion time. Safe for concurrent use.
type recorder struct {
	start time.Time

	mu     sync.Mutex
	all    *Histogram
	perSec []*Histogram
	// client and server split perSec's latencies in two (see
	// clientWait): the measuring process's own wait, and the rest.
	client, server []*Histogram
	done           []int
	ok             int64
	failed         int64
	errs           map[string]int
	// observe, when set, is given each transaction's server part as it
	// ends: the application's own latency histogram (prom.go).
	observe func(time.Duration)
}

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, all: NewHistogram(), errs: map[string]int{}}
}

func (r *recorder) second(t time.Time) int { return max(0, int(t.Sub(r.start)/time.Second)) }

func (r *recorder) record(at time.Time, lat time.Duration, err error) {
	r.recordSplit(at, lat, -1, err)
}

// clientWait is the part of a transaction's latency spent waiting for
// the measuring process itself, not for the database: the generator's
// lateness behind the schedule (scheduled at, queued at sent), and the
// time a worker that was already free took to pick it up (a goroutine
// waking on this process's CPU). Waiting for a worker that was busy with
// an earlier transaction is waiting for the database, and counts in the
// server part, as do the pool's connection and the round trips.
func clientWait(at, sent, free, picked time.Time) time.Duration {
	lag := max(0, sent.Sub(at))
	wake := max(0, picked.Sub(maxTime(sent, free)))
	return lag + wake
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// recordSplit records one transaction's latency lat, client of it the
// measuring process's own wait (clientWait); client < 0 records no
// split.
func (r *recorder) recordSplit(at time.Time, lat, client time.Duration, err error) {
	// The application's histogram sees the warm-up too: its job-free
	// baseline is learnt there.
	if r.observe != nil && err == nil && client >= 0 {
		r.observe(lat - min(client, lat))
	}
	if at.Before(r.start) {
		return // the warm-up's
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed++
		msg := err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			msg = "timeout"
		}
		r.errs[msg]++
		return
	}
	r.ok++
	r.all.Record(lat)
	s := r.second(at)
	for len(r.perSec) <= s {
		r.perSec = append(r.perSec, NewHistogram())
	}
	r.perSec[s].Record(lat)
	if client >= 0 {
		for len(r.client) <= s {
			r.client, r.server = append(r.client, NewHistogram()), append(r.server, NewHistogram())
		}
		client = min(client, lat)
		r.client[s].Record(client)
		r.server[s].Record(lat - client)

	}
	c := r.second(at.Add(lat))
	for len(r.done) <= c {
		r.done = append(r.done, 0)
	}
	r.done[c]++
}

func (r *recorder) fail(at time.Time) {
	if at.Before(r.start) {
		return
	}
	r.mu.Lock()
	r.failed++
	r.errs["not started before the run's end"]++
	r.mu.Unlock()
}
