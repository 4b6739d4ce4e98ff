package chaos

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// An echo server behind the proxy: bytes pass; a stall holds them until
// it ends, and then they arrive; a delay adds at least its length.
func TestProxyPassesStallsAndDelays(t *testing.T) {
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
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	p, err := NewProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(msg string, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := echo("one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.Stall()
	if got, err := echo("two", 300*time.Millisecond); err == nil {
		t.Fatalf("a stalled proxy passed %q", got)
	}
	p.Unstall()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the stall: %q, %v; want what was held", got, err)
	}

	p.SetDelay(150 * time.Millisecond)
	start := time.Now()
	if got, err := echo("three", 5*time.Second); err != nil || got != "three\n" {
		t.Fatalf("delayed: %q, %v", got, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("a round trip through a 150 ms delay took %s; want at least 300 ms (both ways)", d)
	}
}
