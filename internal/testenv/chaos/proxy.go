// Package chaos is throttled's standing fault campaign (make chaos, and a
// short seeded run in make test): the faults a production primary meets,
// one after another, while a foreground, exec workers and a sidecar are
// busy, with invariants checked after each. This file is its network
// fault: a TCP proxy between the workers and the primary that the
// campaign can stall (sustained packet loss) or slow (added delay).
package chaos

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a target. It is
// safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled chan struct{} // closed when a stall ends; nil while none
	delay   time.Duration
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stall holds every byte in both directions, on open connections and new
// ones, until Unstall: what a link dropping every packet looks like to
// TCP (it retransmits; nothing arrives).
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Unstall ends a stall: what was held is delivered.
func (p *Proxy) Unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// SetDelay delays every chunk of bytes, in each direction, by d (0 for
// none).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Close stops listening, cuts every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			in.Close()
			out.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst, chunk by chunk, honouring stalls and the
// delay, until either side closes; then it closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
		src.Close()
		dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hold() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a cut connection: close both sides
		}
	}
}

// hold waits out a stall and the delay; false once the proxy is closed.
func (p *Proxy) hold() bool {
	for {
		p.mu.Lock()
		stalled, delay, closed := p.stalled, p.delay, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if stalled != nil {
			<-stalled
			continue
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			<-t.C
		}
		return true
	}
}
