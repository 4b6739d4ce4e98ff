package sidecar

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/throttled/throttled/config"
	"github.com/throttled/throttled/holds"
	"github.com/throttled/throttled/sidecar/api"
	"github.com/throttled/throttled/throttle/hold"
)

// ScopeUI marks the confirm page's routes: they authenticate the person
// themselves (an SSO proxy's user header, or a bearer token with the
// pause scope) and guard every POST with a CSRF token.
const ScopeUI config.Scope = "ui"

// csrfLife is how long a confirm page's form stays valid.
const csrfLife = 15 * time.Minute

// uiUser is the person the request is from: the name audited as the
// hold's actor. ok is false when the request names nobody we trust.
func (s *Server) uiUser(r *http.Request) (actor string, ok bool) {
	cfg := s.config()
	if h := cfg.Grafana.UserHeader; h != "" {
		if u := strings.TrimSpace(r.Header.Get(h)); u != "" {
			return u, true
		}
	}
	if secret, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && secret != "" {
		if t, known := cfg.Token(secret); known && t.Allows(config.ScopePause) {
			return "token:" + t.Name, true
		}
	}
	return "", false
}

// csrfToken binds a form to its user and the time it was served: the HMAC
// of both under a key that lives as long as the process.
func (s *Server) csrfToken(actor string, at time.Time) string {
	stamp := strconv.FormatInt(at.Unix(), 10)
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte(actor + "\x00" + stamp))
	return stamp + "." + hex.EncodeToString(m.Sum(nil))
}

func (s *Server) checkCSRF(actor, tok string, now time.Time) error {
	stamp, _, ok := strings.Cut(tok, ".")
	if !ok {
		return errors.New("the form has no CSRF token; reload the page and submit it again")
	}
	sec, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return errors.New("the form's CSRF token is malformed")
	}
	at := time.Unix(sec, 0)
	if now.Sub(at) > csrfLife || at.After(now.Add(time.Minute)) {
		return fmt.Errorf("the form expired (served %s ago; forms last %s); reload the page", now.Sub(at).Round(time.Second), csrfLife)
	}
	if !hmac.Equal([]byte(s.csrfToken(actor, at)), []byte(tok)) {
		return errors.New("the form's CSRF token is not valid for you")
	}
	return nil
}

// returnURL checks a return address against the allow-list. Empty is
// allowed (no redirect).
func returnURL(cfg *config.Config, raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("return URL %q is not an absolute http(s) URL", raw)
	}
	if hasDotSegment(u) {
		return "", fmt.Errorf("return URL %q has dot segments or encoded slashes", raw)
	}
	for _, allowed := range cfg.Grafana.ReturnURLs {
		a, err := url.Parse(allowed)
		if err == nil && a.Scheme == u.Scheme && strings.EqualFold(a.Host, u.Host) && underPath(u.Path, a.Path) {
			return u.String(), nil
		}
	}
	return "", fmt.Errorf("return URL %q is not under any of grafana.return_urls", raw)
}

// hasDotSegment reports whether u's path could step out from under an
// allowed path once a browser or server resolves it: a "." or ".."
// segment, written plainly or percent-encoded (%2e%2e, .%2e, %2E.), an
// encoded slash or backslash, a backslash, or an encoded percent sign
// (which a second decoding could turn into any of these).
func hasDotSegment(u *url.URL) bool {
	esc := strings.ToLower(u.EscapedPath())
	if strings.Contains(esc, "%2f") || strings.Contains(esc, "%5c") || strings.Contains(esc, "%25") || strings.ContainsRune(u.Path, '\\') {
		return true
	}
	for _, p := range []string{u.Path, esc} { // u.Path is decoded: %2e%2e reads ".."
		for seg := range strings.SplitSeq(p, "/") {
			if seg == "." || seg == ".." {
				return true
			}
		}
	}
	return false
}

// underPath reports whether p is allowed or under it, on a segment
// boundary: /d/x is under /d and /d/, /dx is under neither.
func underPath(p, allowed string) bool {
	if allowed == "" || allowed == "/" || p == allowed {
		return true
	}
	if strings.HasSuffix(allowed, "/") {
		return strings.HasPrefix(p, allowed)
	}
	return strings.HasPrefix(p, allowed+"/")
}

// uiHeaders keep the page out of frames (no clickjacking of the pause
// button) and let its forms post only here and redirect only to ret.
func uiHeaders(w http.ResponseWriter, ret string) {
	formAction := "'self'"
	if u, err := url.Parse(ret); err == nil && u.Host != "" {
		formAction += " " + u.Scheme + "://" + u.Host
	}
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'; form-action "+formAction)
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
}

type uiPage struct {
	Job     api.Job
	Known   bool
	Actor   string
	CSRF    string
	Return  string
	TTL     string
	MaxTTL  string
	Signals []api.Signal
	Holds   []hold.Hold
	Error   string
	Done    string
}

var uiTemplate = template.Must(template.New("pause").Funcs(template.FuncMap{"deref": func(v *float64) float64 { return *v }}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>throttled: pause {{.Job.Job}}</title>
<style>body{font-family:sans-serif;max-width:46em;margin:2em auto;color:#222}table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}.err{color:#b00}.stale{color:#b00}label{display:block;margin:.6em 0}</style>
</head><body>
<h1>Pause <code>{{.Job.Job}}</code></h1>
{{if .Error}}<p class="err" id="error">{{.Error}}</p>{{end}}
{{if .Done}}<p id="done">{{.Done}}</p>{{end}}
{{if .Known}}
<p>State: <strong id="state">{{.Job.State}}</strong>{{if .Job.Code}}, <span id="code">{{.Job.Code}}</span>{{end}}{{if .Job.Reason}} ({{.Job.Reason}}){{end}}; rate {{printf "%.2f" .Job.Rate}}/s{{if .Job.Binding}}; binding signal {{.Job.Binding}}{{end}}.</p>
<h2>The database now</h2>
{{if .Signals}}<table><tr><th>signal</th><th>labels</th><th>value</th><th>age</th></tr>
{{range .Signals}}<tr><td>{{.Name}}</td><td>{{range $k, $v := .Labels}}{{$k}}={{$v}} {{end}}</td><td>{{if .Error}}<span class="stale">{{.Error}}</span>{{else if .Value}}{{printf "%.3g" (deref .Value)}}{{end}}</td><td{{if .Stale}} class="stale"{{end}}>{{printf "%.1f" .AgeSeconds}} s{{if .Stale}} (stale){{end}}</td></tr>
{{end}}</table>{{else}}<p>This process does not lead, so it holds no samples; the leader's dashboard shows them.</p>{{end}}
{{if .Holds}}<h2>Holds on this job</h2>
<table><tr><th>hold</th><th>source</th><th>by</th><th>reason</th><th>expires</th><th></th></tr>
{{range .Holds}}<tr><td>{{.ID}}</td><td>{{.Source}}</td><td>{{.Actor}}</td><td>{{.Reason}}</td><td>{{.Expires.UTC.Format "2006-01-02 15:04:05Z"}}</td>
<td><form method="post" action="release"><input type="hidden" name="csrf" value="{{$.CSRF}}"><input type="hidden" name="job" value="{{$.Job.Job}}"><input type="hidden" name="return" value="{{$.Return}}"><input type="hidden" name="id" value="{{.ID}}"><button type="submit" id="release-{{.ID}}">Resume (release {{.ID}})</button></form></td></tr>
{{end}}</table>{{end}}
<h2>Pause it</h2>
<form method="post" action="pause" id="pause-form">
<input type="hidden" name="csrf" value="{{.CSRF}}"><input type="hidden" name="job" value="{{.Job.Job}}"><input type="hidden" name="return" value="{{.Return}}">
<label>Reason (audited, shown to everyone) <input name="reason" id="reason" required size="50"></label>
<label>For <input name="ttl" id="ttl" value="{{.TTL}}" size="6"> (at most {{.MaxTTL}}; it ends on its own)</label>
<button type="submit" id="confirm">Pause {{.Job.Job}} as {{.Actor}}</button>
</form>
{{end}}
</body></html>
`))

func (s *Server) renderUI(w http.ResponseWriter, r *http.Request, code int, actor, job, ret, msg, done string) {
	cfg := s.config()
	page := uiPage{Actor: actor, CSRF: s.csrfToken(actor, time.Now()), Return: ret, Error: msg, Done: done,
		TTL: cfg.HoldTTL.Default.String(), MaxTTL: cfg.HoldTTL.Max.String()}
	js, known := s.jobState(job)
	page.Job, page.Known = js.Job, known
	page.Job.Job = job
	if !page.Known && msg == "" {
		code, page.Error = http.StatusNotFound, fmt.Sprintf("no job %q is configured", job)
	}
	if page.Known {
		if s.client.Leader() {
			page.Signals = signalsJSON(s.client.Snapshot(), s.client.Unfresh)
		}
		// The holds that cover the job, as the watcher last confirmed them
		// (from memory: the page never waits on the database to render).
		for _, h := range s.client.HoldWatcher().Applying(time.Now(), job) {
			if h.ID != holds.UnconfirmedHoldID {
				page.Holds = append(page.Holds, h)
			}
		}
	}
	uiHeaders(w, ret)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = uiTemplate.Execute(w, page)
}

// uiAuth resolves the person or answers 401.
func (s *Server) uiAuth(w http.ResponseWriter, r *http.Request) (string, bool) {
	actor, ok := s.uiUser(r)
	if !ok {
		uiHeaders(w, "")
		w.Header().Set("WWW-Authenticate", `Bearer realm="throttled"`)
		how := "a bearer token with the pause scope"
		if h := s.config().Grafana.UserHeader; h != "" {
			how = "the " + h + " header from your SSO proxy, or " + how
		}
		http.Error(w, "throttled: sign in first: this page needs "+how, http.StatusUnauthorized)
	}
	return actor, ok
}

// uiPause: GET shows the confirm page and never changes anything.
func (s *Server) uiPauseGet(w http.ResponseWriter, r *http.Request, _ config.Token) {
	actor, ok := s.uiAuth(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	ret, err := returnURL(s.config(), q.Get("return"))
	if err != nil {
		s.renderUI(w, r, http.StatusBadRequest, actor, q.Get("job"), "", err.Error(), "")
		return
	}
	s.renderUI(w, r, http.StatusOK, actor, q.Get("job"), ret, "", "")
}

// uiForm authenticates a POST and checks its origin, CSRF token and
// return URL.
func (s *Server) uiForm(w http.ResponseWriter, r *http.Request) (actor, job, ret string, ok bool) {
	if actor, ok = s.uiAuth(w, r); !ok {
		return
	}
	ok = false
	if err := r.ParseForm(); err != nil {
		http.Error(w, "throttled: the form could not be read: "+err.Error(), http.StatusBadRequest)
		return
	}
	job = r.PostForm.Get("job")
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		if u, err := url.Parse(o); err != nil || !strings.EqualFold(u.Host, r.Host) {
			s.renderUI(w, r, http.StatusForbidden, actor, job, "", fmt.Sprintf("refused: the form was posted from %s, not from this page", o), "")
			return
		}
	}
	if err := s.checkCSRF(actor, r.PostForm.Get("csrf"), time.Now()); err != nil {
		s.renderUI(w, r, http.StatusForbidden, actor, job, "", "refused: "+err.Error(), "")
		return
	}
	ret, err := returnURL(s.config(), r.PostForm.Get("return"))
	if err != nil {
		s.renderUI(w, r, http.StatusBadRequest, actor, job, "", err.Error(), "")
		return
	}
	return actor, job, ret, true
}

func (s *Server) finishUI(w http.ResponseWriter, r *http.Request, actor, job, ret, done string) {
	if ret != "" {
		uiHeaders(w, ret)
		http.Redirect(w, r, ret, http.StatusSeeOther)
		return
	}
	s.renderUI(w, r, http.StatusOK, actor, job, "", "", done)
}

// uiPausePost adds the hold the person confirmed.
func (s *Server) uiPausePost(w http.ResponseWriter, r *http.Request, _ config.Token) {
	actor, job, ret, ok := s.uiForm(w, r)
	if !ok {
		return
	}
	if _, known := s.jobState(job); !known {
		s.renderUI(w, r, http.StatusNotFound, actor, job, ret, fmt.Sprintf("no job %q is configured", job), "")
		return
	}
	var ttl time.Duration
	if t := strings.TrimSpace(r.PostForm.Get("ttl")); t != "" {
		var err error
		if ttl, err = time.ParseDuration(t); err != nil {
			s.renderUI(w, r, http.StatusBadRequest, actor, job, ret, fmt.Sprintf("ttl %q: want a duration such as 30m", t), "")
			return
		}
	}
	h, err := s.db.Holds().Add(r.Context(), hold.Request{Scope: hold.OneJob(job), Source: hold.SourceManual,
		Reason: strings.TrimSpace(r.PostForm.Get("reason")), Actor: actor, TTL: ttl})
	if errors.Is(err, hold.ErrInvalid) {
		s.renderUI(w, r, http.StatusBadRequest, actor, job, ret, err.Error(), "")
		return
	}
	if err != nil {
		s.renderUI(w, r, http.StatusInternalServerError, actor, job, ret, "the hold was not added: "+err.Error(), "")
		return
	}
	s.finishUI(w, r, actor, job, ret, fmt.Sprintf("Paused: hold %s until %s.", h.ID, h.Expires.UTC().Format(time.RFC3339)))
}

// uiRelease ends one hold on the person's behalf.
func (s *Server) uiRelease(w http.ResponseWriter, r *http.Request, _ config.Token) {
	actor, job, ret, ok := s.uiForm(w, r)
	if !ok {
		return
	}
	id := r.PostForm.Get("id")
	_, err := s.db.Holds().Release(r.Context(), id, actor, hold.SourceManual, "released from the confirm page")
	switch {
	case errors.Is(err, hold.ErrUnknown):
		s.renderUI(w, r, http.StatusNotFound, actor, job, ret, err.Error(), "")
	case err != nil:
		s.renderUI(w, r, http.StatusInternalServerError, actor, job, ret, "the hold was not released: "+err.Error(), "")
	default:
		s.finishUI(w, r, actor, job, ret, "Released "+id+".")
	}
}
