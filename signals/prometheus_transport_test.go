package signals

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answer writes a Prometheus API answer to the query of r, as a healthy
// Prometheus would with fresh data: a dating query (freshnessQuery) gets
// one series per selector dated now, any other query the scalar 0.5.
func answer(w http.ResponseWriter, r *http.Request) {
	q := r.FormValue("query")
	now := float64(time.Now().UnixMilli()) / 1000
	var data string
	if n := strings.Count(q, "label_replace("); n > 0 {
		var series []string
		for i := range n {
			series = append(series, fmt.Sprintf(`{"metric":{"throttled_selector":"%d"},"value":[%.3f,"%.3f"]}`, i, now, now))
		}
		data = `{"resultType":"vector","result":[` + strings.Join(series, ",") + `]}`
	} else {
		data = fmt.Sprintf(`{"resultType":"scalar","result":[%.3f,"0.5"]}`, now)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"status":"success","data":%s}`, data)
}

// listen serves h on host (an address of the loopback, 127/8) until the
// test ends.
func listen(t *testing.T, host string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", host, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// The credentials go to the configured origin only. A Prometheus address
// that redirects to another host (here 127.0.0.2, never configured) used
// to have the bearer token or the basic password sent there, and its
// answer taken as data: authTransport added the header to every request,
// the redirected one too, past Go's own stripping of credentials on a
// redirect to another host. Now the redirect is refused and the sample
// fails; the other host sees no request at all.
func TestPrometheusRedirectToAnotherOrigin(t *testing.T) {
	var seen, auth atomic.Int64
	other := listen(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if r.Header.Get("Authorization") != "" {
			auth.Add(1)
		}
		answer(w, r)
	}))
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		redirector := listen(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+r.URL.Path, code)
		}))
		for _, cred := range []struct {
			name   string
			cfg    PrometheusConfig
			secret string
		}{
			{"bearer", PrometheusConfig{BearerToken: "tok-9d1c2b3a4e5f6071"}, "tok-9d1c2b3a4e5f6071"},
			{"basic", PrometheusConfig{BasicUser: "throttled", BasicPassword: "pass-5e6f7a8b9c0d"}, "pass-5e6f7a8b9c0d"},
		} {
			t.Run(fmt.Sprintf("%d %s", code, cred.name), func(t *testing.T) {
				seen.Store(0)
				auth.Store(0)
				cfg := cred.cfg
				cfg.Address = redirector.URL
				x := read((&reader{cfg: cfg}).sampler(t, absolute("app_value", "app_single")))
				mustFail(t, x, "redirect", "another origin", "refused", redirector.URL)
				t.Logf("error: %v", x.Err)
				if strings.Contains(x.Err.Error(), cred.secret) {
					t.Errorf("error %q shows the secret", x.Err)
				}
				cfg.Signals = []PrometheusSignal{absolute("app_value", "app_single")}
				err := CheckPrometheus(context.Background(), cfg)
				if err == nil || !strings.Contains(err.Error(), "another origin") {
					t.Errorf("CheckPrometheus: %v, want the redirect refused", err)
				}
				if n, a := seen.Load(), auth.Load(); n != 0 || a != 0 {
					t.Errorf("the other origin saw %d requests, %d with an Authorization header; want none", n, a)
				}
			})
		}
	}
}

// A redirect within the configured origin (a Prometheus under a path
// prefix) is followed, with the credentials.
func TestPrometheusRedirectSameOrigin(t *testing.T) {
	const user, password = "throttled", "pass-5e6f7a8b9c0d"
	srv := listen(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/prom/") {
			http.Redirect(w, r, "/prom"+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		answer(w, r)
	}))
	cfg := PrometheusConfig{Address: srv.URL, BasicUser: user, BasicPassword: password}
	x := read((&reader{cfg: cfg}).sampler(t, absolute("app_value", "app_single")))
	if x.Err != nil || x.Value != 0.5 {
		t.Fatalf("got %+v (error %v), want 0.5 through the redirect", x, x.Err)
	}
}

// secretForms are the encodings of the credentials an echo may carry:
// each secret as it is, base64 of user:password (standard and URL, padded
// and raw), and each of those URL-escaped, quoted, JSON- and
// HTML-escaped.
func secretForms(user, password, token string) []string {
	var raw []string
	if token != "" {
		raw = append(raw, token)
	}
	if password != "" {
		up := []byte(user + ":" + password)
		raw = append(raw, password, base64.StdEncoding.EncodeToString(up), base64.URLEncoding.EncodeToString(up),
			base64.RawStdEncoding.EncodeToString(up), base64.RawURLEncoding.EncodeToString(up))
	}
	var out []string
	for _, s := range raw {
		q := strconv.Quote(s)
		j, _ := json.Marshal(s)
		out = append(out, s, url.QueryEscape(s), url.PathEscape(s), q[1:len(q)-1], string(j[1:len(j)-1]), html.EscapeString(s))
	}
	return out
}

// leaks says which of texts carries one of forms, or "".
func leaks(texts, forms []string) string {
	for _, text := range texts {
		for _, form := range forms {
			if strings.Contains(text, form) {
				return fmt.Sprintf("error %q carries the secret as %q", text, form)
			}
		}
	}
	return ""
}

// texts is the Error() of err and of every error it wraps.
func texts(err error) []string {
	if err == nil {
		return nil
	}
	out := []string{err.Error()}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, texts(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, texts(e)...)
		}
	}
	return out
}

// An answer that echoes the request (an auth proxy's 400 with the
// request's headers in its body) carries the credentials into the error
// in every encoding the request had them in. redact used to remove the
// literal token and password only: the basic password went out as
// base64 of user:password, and a token URL-escaped. Now no encoding of
// either is in the error's text, nor in any error it wraps, nor in
// CheckPrometheus's.
func TestPrometheusEchoedCredentialsRedacted(t *testing.T) {
	// Secrets whose encodings differ from each other: '/' and '+' escape,
	// and base64 of user:password differs between its alphabets.
	const user, password, token = "throttled", "pa/ss+wo~rd?>>7q", "tok/3f9a+7c1e.5b2d~"
	if base64.StdEncoding.EncodeToString([]byte(user+":"+password)) == base64.URLEncoding.EncodeToString([]byte(user+":"+password)) {
		t.Fatal("pick a password whose base64 differs between the standard and URL alphabets")
	}
	echo := func(r *http.Request) string {
		a := r.Header.Get("Authorization")
		_, cred, _ := strings.Cut(a, " ")
		return fmt.Sprintf("bad request: you sent Authorization: %s (escaped %s, credential %s, quoted %q, html %s)",
			a, url.QueryEscape(a), cred, a, html.EscapeString(a))
	}
	for _, tc := range []struct {
		name  string
		reply func(w http.ResponseWriter, r *http.Request)
	}{
		{"400 in the API's shape", func(w http.ResponseWriter, r *http.Request) {
			b, _ := json.Marshal(map[string]string{"status": "error", "errorType": "bad_data", "error": echo(r)})
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write(b)
		}},
		{"200 whose status is error", func(w http.ResponseWriter, r *http.Request) {
			b, _ := json.Marshal(map[string]string{"status": "error", "errorType": "execution", "error": echo(r)})
			w.Write(b)
		}},
		{"400 in plain text", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, echo(r), http.StatusBadRequest)
		}},
		{"502 in html", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, "<html><body>%s</body></html>", html.EscapeString(echo(r)))
		}},
	} {
		srv := listen(t, "127.0.0.1", http.HandlerFunc(tc.reply))
		for _, cfg := range []PrometheusConfig{
			{Address: srv.URL, BasicUser: user, BasicPassword: password},
			{Address: srv.URL, BearerToken: token},
		} {
			name := tc.name + " basic"
			if cfg.BearerToken != "" {
				name = tc.name + " bearer"
			}
			t.Run(name, func(t *testing.T) {
				x := read((&reader{cfg: cfg}).sampler(t, absolute("app_value", "app_single")))
				mustFail(t, x)
				cfg.Signals = []PrometheusSignal{absolute("app_value", "app_single")}
				check := CheckPrometheus(context.Background(), cfg)
				if check == nil {
					t.Fatal("CheckPrometheus passed, want the failure")
				}
				if leak := leaks(append(texts(x.Err), texts(check)...), secretForms(cfg.BasicUser, cfg.BasicPassword, cfg.BearerToken)); leak != "" {
					t.Error(leak)
				}
				t.Logf("error: %v", x.Err)
			})
		}
	}
}

// An answer over 1 MiB (maxAnswer) fails before it is decoded, whatever
// it holds. client_golang used to read and decode the whole body: a
// 400,000-series answer, refused as "400000 series, want one", took 404
// MiB on the way, over the sidecar's 256Mi memory limit.
func TestPrometheusAnswerSizeBound(t *testing.T) {
	const size = 64 << 20
	chunk := []byte(strings.Repeat(`{"metric":{"__name__":"app_requests","instance":"10.0.0.1:8080","path":"/api/v1/things"},"value":[1700000000,"1"]},`, 512))
	srv := listen(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`)); err != nil {
			return
		}
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		w.Write([]byte(`{"metric":{},"value":[1700000000,"1"]}]}}`))
	}))
	cfg := PrometheusConfig{Address: srv.URL, Timeout: 10 * time.Second}
	s := (&reader{cfg: cfg}).sampler(t, absolute("app_value", "app_requests"))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	x := read(s)
	runtime.ReadMemStats(&after)
	mustFail(t, x, "answer over 1 MiB", "aggregate them")
	// About 4 MiB (8 under -race): the body read into a growing buffer.
	// Without the bound, over 20 times the body.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("the reading allocated %d KiB", alloc>>10)
	if alloc > size/4 {
		t.Errorf("the reading allocated %d MiB; want under %d MiB for an answer bounded at 1 MiB (the body was %d MiB)", alloc>>20, size/4>>20, size>>20)
	}
	if errors.Is(x.Err, ErrTimeout) {
		t.Errorf("error %v is a timeout, want the size bound", x.Err)
	}
}

// An answer's words reach an error as a bounded excerpt, with any
// Authorization header's value in them removed, the configuration's or
// not (a proxy's own credential, echoed). They used to be whole.
func TestPrometheusEchoedAnswerBounded(t *testing.T) {
	const foreign = "proxy-own-9f8e7d6c5b4a"
	srv := listen(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg := "upstream refused: Authorization: Bearer " + foreign + "; " + strings.Repeat("x", 10000)
		b, _ := json.Marshal(map[string]string{"status": "error", "errorType": "bad_data", "error": msg})
		w.WriteHeader(http.StatusBadRequest)
		w.Write(b)
	}))
	x := read((&reader{cfg: PrometheusConfig{Address: srv.URL}}).sampler(t, absolute("app_value", "app_single")))
	mustFail(t, x, "Prometheus refused it: upstream refused: Authorization: Bearer [redacted]", "[cut]")
	if strings.Contains(x.Err.Error(), foreign) {
		t.Errorf("error %q carries the echoed credential", x.Err)
	}
	if n := len(x.Err.Error()); n > 700 {
		t.Errorf("error of %d bytes, want the answer's words cut at 512", n)
	}
}
