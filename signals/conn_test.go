package signals

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A server that accepts TCP but never answers (hung) makes each connect
// attempt take the full timeout; the backoff counts from when the attempt
// gave up, so the next one is still paced after it.
func TestReconnectBackoffOutlastsTheFailedAttempt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold open, never answer
		}
	}()
	timeout := 300 * time.Millisecond
	s, err := newServer(kindPrimary, "postgres://u:p@"+ln.Addr().String()+"/db?sslmode=disable", timeout, false, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ensure(context.Background(), time.Now()); err == nil {
		t.Fatal("connected to a hung server")
	}
	if wait := s.retryAt.Sub(time.Now()); wait <= 0 {
		t.Fatalf("after a failed %s connect attempt the next reconnect is already due (retryAt %s ago): no backoff", timeout, -wait)
	}
}
