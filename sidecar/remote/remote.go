// Package remote is a Go client of the sidecar's token API, for workers
// that do not embed the controller: its [WorkerPacer] satisfies the jobs
// package's Pacer, so a jobs.Job paced through the sidecar behaves like a
// local one.
//
// It never turns an outage into a retry storm: a throttled answer (429)
// waits the Retry-After the sidecar gives (plus jitter) and asks again for
// as long as the caller's context allows; a failure (503 load shed, 5xx,
// a network error) backs off with full jitter, never shorter than
// Retry-After, and gives up after MaxAttempts in a row.
//
// A batch's report is never dropped silently: one the sidecar cannot take
// yet (a restart, a 5xx, a network error) is sent again for up to
// ReportFor; one it refuses (an expired token, 410; an unknown one, 404)
// or never took is logged and counted ([Client.ReportsFailed]).
package remote

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/internal/wait"
	"github.com/throttled/throttled/jobs"
	"github.com/throttled/throttled/sidecar/api"
)

// Config configures a [Client].
type Config struct {
	// BaseURL is the sidecar, such as "http://127.0.0.1:18087". Required.
	BaseURL string
	// Token is a bearer token with the work scope. Required.
	Token string
	// MaxAttempts is how many failures in a row a Wait tolerates. Defaults
	// to 6.
	MaxAttempts int
	// Backoff and MaxBackoff shape the full-jitter backoff after a
	// failure. Default 200ms and 10s.
	Backoff, MaxBackoff time.Duration
	// HTTPClient defaults to one with a 15 s timeout.
	HTTPClient *http.Client
	// Worker names this worker to the sidecar, which shows it in the
	// job's reason while the worker's tokens are unreported. Defaults to
	// the host's name (at most 64 characters).
	Worker string
	// Log hears each report the sidecar refused or never took, at error
	// level. Defaults to a null logger: read [Client.ReportsFailed].
	Log hclog.Logger
	// ReportFor bounds how long a batch's report is sent again while the
	// sidecar cannot take it (it restarts, answers 5xx, cannot be
	// reached). Defaults to 30s.
	ReportFor time.Duration

	sleep func(context.Context, time.Duration) error // tests replace it
}

// ConfigFromEnv is the configuration a worker beside a sidecar reads from
// its environment, as the shipped Kubernetes manifest sets it:
// THROTTLED_ADDR (the sidecar's URL) and THROTTLED_TOKEN (a token with the
// work scope).
func ConfigFromEnv() Config {
	return Config{BaseURL: os.Getenv("THROTTLED_ADDR"), Token: os.Getenv("THROTTLED_TOKEN")}
}

// ErrGaveUp reports a Wait that failed MaxAttempts times in a row.
var ErrGaveUp = errors.New("remote: gave up")

// Client talks to one sidecar. It is safe for concurrent use.
type Client struct {
	cfg          Config
	reportFailed atomic.Int64
}

// ReportsFailed is how many batches' reports the sidecar refused or never
// took since the Client was made. Each such batch's rows and outcome are
// missing from the sidecar's counts: a worker should export it as a
// metric and alert on its growth.
func (c *Client) ReportsFailed() int64 { return c.reportFailed.Load() }

// ReportError is a report the sidecar refused (Status, with its answer) or
// never took (Err).
type ReportError struct {
	Job    string
	Status int
	Body   string
	Err    error
}

func (e *ReportError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("remote: report for %s not taken: %v", e.Job, e.Err)
	}
	return fmt.Sprintf("remote: report for %s refused: %d: %s", e.Job, e.Status, e.Body)
}

func (e *ReportError) Unwrap() error { return e.Err }

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if _, err := url.ParseRequestURI(cfg.BaseURL); err != nil || cfg.BaseURL == "" {
		return nil, fmt.Errorf("remote: BaseURL %q: want an http(s) URL", cfg.BaseURL)
	}
	if cfg.Token == "" {
		return nil, errors.New("remote: Token is required")
	}
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 6)
	cfg.Backoff = cmp.Or(cfg.Backoff, 200*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 10*time.Second)
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		cfg.Worker = cut(host, 64)
	}
	if len(cfg.Worker) > 64 || !utf8.ValidString(cfg.Worker) || strings.IndexFunc(cfg.Worker, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return nil, fmt.Errorf("remote: Worker %q: at most 64 printable characters", cfg.Worker)
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	cfg.ReportFor = cmp.Or(cfg.ReportFor, 30*time.Second)
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	if cfg.sleep == nil {
		cfg.sleep = wait.For
	}
	return &Client{cfg: cfg}, nil
}

// WorkerPacer paces one job of a remote worker through the sidecar. It
// satisfies jobs.Pacer and is a jobs.Progresser: a job's batch size,
// retries and remaining rows go with each batch's own report.
type WorkerPacer struct {
	c      *Client
	job    string
	bounds atomic.Pointer[api.BatchBounds] // the last the sidecar sent; nil before any
}

// BatchBounds reports the batch bounds the sidecar's configuration gives
// the job, from the last token's answer: the job sizes its batches within
// them (it is a jobs.BatchBounder); a bound the configuration does not
// set is 0. ok is false before the first token.
func (p *WorkerPacer) BatchBounds() (minSize, maxSize int, target time.Duration, ok bool) {
	b := p.bounds.Load()
	if b == nil {
		return 0, 0, 0, false
	}
	return b.MinSize, b.MaxSize, time.Duration(b.TargetDurationMs * float64(time.Millisecond)), true
}

// WaitProgress is Wait whose report also carries the batch's details.
func (p *WorkerPacer) WaitProgress(ctx context.Context) (func(int64, time.Duration, error, jobs.Progress), error) {
	token, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	return func(rows int64, took time.Duration, err error, pr jobs.Progress) {
		p.report(token, rows, took, err, &pr)
	}, nil
}

// Pacer returns job's pacer.
func (c *Client) Pacer(job string) *WorkerPacer { return &WorkerPacer{c: c, job: job} }

// Wait takes one token for the job, waiting as the sidecar says, and
// returns the function that reports the batch (and frees its slot).
func (p *WorkerPacer) Wait(ctx context.Context) (func(rows int64, took time.Duration, err error), error) {
	token, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	return func(rows int64, took time.Duration, err error) { p.report(token, rows, took, err, nil) }, nil
}

// acquire takes one token, waiting as the sidecar says.
func (p *WorkerPacer) acquire(ctx context.Context) (string, error) {
	failures := 0
	for {
		code, retryAfter, body, err := p.c.post(ctx, "/v1/jobs/"+url.PathEscape(p.job)+"/acquire", api.AcquireRequest{N: 1, MaxWait: "2s", Worker: p.c.cfg.Worker})
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		switch {
		case err == nil && code == http.StatusOK:
			var resp api.AcquireResponse
			if err := json.Unmarshal(body, &resp); err != nil || len(resp.Tokens) == 0 {
				return "", fmt.Errorf("remote: acquire %s: unreadable answer", p.job)
			}
			if b := resp.Batch; b != nil && (b.MinSize < 0 || b.MaxSize < 0 || b.TargetDurationMs < 0 ||
				math.IsNaN(b.TargetDurationMs) || b.TargetDurationMs > float64(math.MaxInt64/int64(time.Millisecond))) {
				return "", fmt.Errorf("remote: acquire %s: batch bounds out of range (min_size %d, max_size %d, target_duration_ms %g)",
					p.job, b.MinSize, b.MaxSize, b.TargetDurationMs)
			}
			if resp.Batch == nil {
				resp.Batch = &api.BatchBounds{} // none set: the job's own again
			}
			p.bounds.Store(resp.Batch)
			return resp.Tokens[0], nil
		case err == nil && code == http.StatusTooManyRequests:
			// Throttled: pacing, not failure. Wait as told, jittered so
			// many workers do not come back in step.
			failures = 0
			d := max(retryAfter, time.Second)
			if err := p.c.cfg.sleep(ctx, d+time.Duration(rand.Int64N(int64(d/2)+1))); err != nil {
				return "", err
			}
			continue
		case err == nil && code < 500 && code != http.StatusServiceUnavailable:
			return "", fmt.Errorf("remote: acquire %s: %d: %s", p.job, code, bytes.TrimSpace(body))
		}
		failures++
		if failures >= p.c.cfg.MaxAttempts {
			if err == nil {
				err = fmt.Errorf("%d: %s", code, bytes.TrimSpace(body))
			}
			return "", fmt.Errorf("%w after %d attempts to acquire for %s: %w", ErrGaveUp, failures, p.job, err)
		}
		ceiling := min(p.c.cfg.MaxBackoff, p.c.cfg.Backoff<<min(failures-1, 20))
		d := max(retryAfter, time.Duration(rand.Int64N(int64(ceiling)+1)))
		if err := p.c.cfg.sleep(ctx, d); err != nil {
			return "", err
		}
	}
}

// report sends one batch's outcome for its token, with its details when
// known, again while the sidecar cannot take it, for up to ReportFor. A
// report refused or never taken is logged and counted, never dropped
// silently; an unreported token expires on the sidecar.
func (p *WorkerPacer) report(token string, rows int64, took time.Duration, err error, pr *jobs.Progress) {
	if rerr := p.send(token, rows, took, err, pr); rerr != nil {
		p.c.reportFailed.Add(1)
		p.c.cfg.Log.Error("batch report not taken: its rows and outcome are not counted", "job", p.job, "rows", rows, "error", rerr)
	}
}

// send is report's one delivery, retried on a failure the sidecar may get
// over; nil once the sidecar took it.
func (p *WorkerPacer) send(token string, rows int64, took time.Duration, err error, pr *jobs.Progress) error {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.ReportFor)
	defer cancel()
	body := api.ReportRequest{Token: token, Rows: rows, DurationMs: float64(took) / float64(time.Millisecond), Error: msg}
	if pr != nil {
		body.BatchSize, body.Retry = pr.BatchSize, pr.Attempt > 1
		if pr.Remaining >= 0 {
			body.Remaining = &pr.Remaining
		}
	}
	for failures := 1; ; failures++ {
		code, retryAfter, answer, err := p.c.post(ctx, "/v1/jobs/"+url.PathEscape(p.job)+"/report", body)
		switch {
		case err == nil && code == http.StatusOK:
			return nil
		case err == nil && code < 500 && code != http.StatusServiceUnavailable:
			return &ReportError{Job: p.job, Status: code, Body: string(bytes.TrimSpace(answer))}
		case err == nil:
			err = fmt.Errorf("%d: %s", code, bytes.TrimSpace(answer))
		}
		ceiling := min(p.c.cfg.MaxBackoff, p.c.cfg.Backoff<<min(failures-1, 20))
		if serr := p.c.cfg.sleep(ctx, max(retryAfter, time.Duration(rand.Int64N(int64(ceiling)+1)))); serr != nil {
			return &ReportError{Job: p.job, Err: fmt.Errorf("%w, for %s", err, p.c.cfg.ReportFor)}
		}
	}
}

func (c *Client) post(ctx context.Context, path string, body any) (int, time.Duration, []byte, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+path, bytes.NewReader(b))
	if err != nil {
		return 0, 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var retry time.Duration
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
		retry = time.Duration(n) * time.Second
	}
	return resp.StatusCode, retry, raw, nil
}

// cut shortens s to at most n bytes, on a rune boundary.
func cut(s string, n int) string {
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
