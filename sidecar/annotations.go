package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/throttled/throttled/throttle/hold"
)

// Annotations pushes every hold to Grafana's annotations API as a region:
// made when the hold is, running to its expiry, moved when the expiry is
// renewed, and cut to the moment it ends when it is released early. Only
// the leader pushes, so many sidecars make one region per hold; a new
// leader adopts the regions already open (found by their tags) instead of
// making them again, and closes those whose holds ended while nobody
// pushed. Every call is bounded; a failure waits, doubling up to a
// minute, and is retried, never blocking anything else.
//
// Tags: throttled, cluster:<cluster>, hold:<id>, source:<source>,
// scope:<scope>. The dashboards' "throttled (pushed to Grafana)"
// annotation shows them; a database's own dashboards can add the same
// tag query.
type Annotations struct {
	url, token, cluster string
	shown               string // url without its password, for logs
	holds               func() []hold.Hold
	leader              func() bool
	log                 hclog.Logger
	client              *http.Client
	now                 func() time.Time

	pushed, failed atomic.Int64
	open           map[string]region // by hold ID
	adopted        bool
}

// region is a pushed hold: its annotation and the end it was given.
type region struct {
	id  int64
	end time.Time
}

// NewAnnotations pushes the holds that holds returns to the Grafana at
// baseURL with a service account token, while leader says this process
// leads.
func NewAnnotations(baseURL, token, cluster string, holds func() []hold.Hold, leader func() bool, log hclog.Logger) *Annotations {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	a := &Annotations{url: strings.TrimRight(baseURL, "/"), token: token, cluster: cluster, holds: holds, leader: leader,
		log: log, client: &http.Client{Timeout: 5 * time.Second}, now: time.Now, open: map[string]region{}}
	a.shown = "(unparsable URL)"
	if u, err := url.Parse(a.url); err == nil {
		a.shown = u.Redacted()
	}
	return a
}

// Counts are the API calls that succeeded and failed.
func (a *Annotations) Counts() (pushed, failed int64) { return a.pushed.Load(), a.failed.Load() }

// Run syncs every interval until ctx ends.
func (a *Annotations) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var wait time.Duration
	var next time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !a.leader() {
			// Another process pushes; on taking over, adopt what is open.
			a.open, a.adopted = map[string]region{}, false
			continue
		}
		if a.now().Before(next) {
			continue
		}
		if err := a.Sync(ctx); err != nil {
			wait = min(max(2*wait, interval), time.Minute)
			next = a.now().Add(wait)
			a.log.Warn("cannot push holds to Grafana's annotations; retrying", "grafana", a.shown, "in", wait, "error", err)
			continue
		}
		wait, next = 0, time.Time{}
	}
}

// Sync makes Grafana's regions match the holds once: it adopts the open
// regions the first time, makes a region for each new hold, moves the
// end of a renewed one and cuts the end of one that has ended.
func (a *Annotations) Sync(ctx context.Context) error {
	now := a.now()
	if !a.adopted {
		if err := a.adopt(ctx, now); err != nil {
			return err
		}
		a.adopted = true
	}
	active := map[string]hold.Hold{}
	for _, h := range a.holds() {
		if h.Expires.After(now) {
			active[h.ID] = h
		}
	}
	// One hold's failure does not hold up the others: each is tried, and
	// the errors are returned together.
	var errs []error
	for id, h := range active {
		r, ok := a.open[id]
		switch {
		case !ok:
			aid, err := a.create(ctx, h)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			a.open[id] = region{id: aid, end: h.Expires}
		case !r.end.Equal(h.Expires):
			switch err := a.setEnd(ctx, r.id, h.Expires); {
			case errors.Is(err, errGone):
				delete(a.open, id) // deleted in Grafana: made again next time
			case err != nil:
				errs = append(errs, err)
			default:
				a.open[id] = region{id: r.id, end: h.Expires}
			}
		}
	}
	for id, r := range a.open {
		if _, ok := active[id]; ok {
			continue
		}
		// Released (or gone) before its expiry: end the region now. One
		// that expired already ends at its expiry. One deleted in Grafana
		// is nothing to end.
		if now.Before(r.end) {
			if err := a.setEnd(ctx, r.id, now); err != nil && !errors.Is(err, errGone) {
				errs = append(errs, err)
				continue
			}
		}
		delete(a.open, id)
	}
	return errors.Join(errs...)
}

// errGone is a region Grafana no longer has (someone deleted it).
var errGone = errors.New("grafana: the annotation is gone")

// annotation is the part of Grafana's annotation we read and write.
type annotation struct {
	ID      int64    `json:"id,omitempty"`
	Time    int64    `json:"time,omitempty"`
	TimeEnd int64    `json:"timeEnd,omitempty"`
	Tags    []string `json:"tags,omitempty"`
	Text    string   `json:"text,omitempty"`
}

// adopt reads this cluster's regions that have not ended yet.
func (a *Annotations) adopt(ctx context.Context, now time.Time) error {
	// Grafana returns the annotations overlapping [from, to]: from now
	// on, only regions that have not ended, however many closed ones
	// the cluster has. No hold lives longer than a day.
	q := url.Values{"tags": {"throttled", "cluster:" + a.cluster}, "type": {"annotation"}, "limit": {"1000"},
		"from": {strconv.FormatInt(now.UnixMilli(), 10)}, "to": {strconv.FormatInt(now.Add(48*time.Hour).UnixMilli(), 10)}}
	var found []annotation
	if err := a.call(ctx, http.MethodGet, "/api/annotations?"+q.Encode(), nil, &found); err != nil {
		return err
	}
	for _, an := range found {
		end := time.UnixMilli(an.TimeEnd)
		if !end.After(now) {
			continue
		}
		for _, tag := range an.Tags {
			if id, ok := strings.CutPrefix(tag, "hold:"); ok {
				a.open[id] = region{id: an.ID, end: end}
			}
		}
	}
	return nil
}

func (a *Annotations) create(ctx context.Context, h hold.Hold) (int64, error) {
	actor := h.Actor
	if actor == "" {
		actor = "unknown"
	}
	does, tags := "hold", []string{"throttled", "cluster:" + a.cluster, "hold:" + h.ID, "source:" + string(h.Source), "scope:" + h.Scope.String()}
	switch {
	case h.Exempt != "":
		does, tags = "exemption from "+h.Exempt, append(tags, "exempt:"+h.Exempt)
	case !h.Pauses():
		does, tags = fmt.Sprintf("override to %.0f%%", 100*h.Ratio), append(tags, fmt.Sprintf("ratio:%g", h.Ratio))
	}
	body := annotation{Time: h.Created.UnixMilli(), TimeEnd: h.Expires.UnixMilli(), Tags: tags,
		Text: fmt.Sprintf("throttled: %s %s %s on %s by %s: %s", h.Source, does, h.ID, h.Scope, actor, h.Reason)}
	var out struct {
		ID int64 `json:"id"`
	}
	if err := a.call(ctx, http.MethodPost, "/api/annotations", body, &out); err != nil {
		return 0, err
	}
	if out.ID == 0 {
		a.pushed.Add(-1)
		a.failed.Add(1)
		return 0, errors.New("grafana: POST /api/annotations answered without an id")
	}
	return out.ID, nil
}

func (a *Annotations) setEnd(ctx context.Context, id int64, end time.Time) error {
	return a.call(ctx, http.MethodPatch, "/api/annotations/"+strconv.FormatInt(id, 10), annotation{TimeEnd: end.UnixMilli()}, nil)
}

// call makes one bounded request. Errors name the method, path and status,
// never the token.
func (a *Annotations) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, method, a.url+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		a.failed.Add(1)
		return fmt.Errorf("grafana: %s %s: %w", method, strings.SplitN(path, "?", 2)[0], redact(err, a.token))
	}
	defer resp.Body.Close()
	// Up to 1000 open regions of about 1 KiB each fit.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	where := method + " " + strings.SplitN(path, "?", 2)[0]
	switch {
	case err != nil:
		a.failed.Add(1)
		return fmt.Errorf("grafana: %s: %w", where, redact(err, a.token))
	case resp.StatusCode == http.StatusNotFound && method == http.MethodPatch:
		a.failed.Add(1)
		return fmt.Errorf("%w: %s: 404", errGone, where)
	case resp.StatusCode/100 != 2:
		a.failed.Add(1)
		return fmt.Errorf("grafana: %s: %d: %.200s", where, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			a.failed.Add(1)
			return fmt.Errorf("grafana: %s: unreadable answer: %w", where, err)
		}
	}
	a.pushed.Add(1)
	return nil
}

// redact keeps a secret out of an error's text.
func redact(err error, secret string) error {
	if secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "[redacted]"))
}
