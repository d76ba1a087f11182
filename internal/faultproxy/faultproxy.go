// Package faultproxy is a loopback TCP proxy that injects network faults
// between a client and a server: pause (a silent partition that holds bytes
// until resumed), blackhole (bytes are swallowed), delay, dropping replies
// after the request was forwarded, and resetting every connection.
package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards connections accepted on a loopback address to a target.
// It is safe for concurrent use.
type Proxy struct {
	ln      net.Listener
	network string
	target  string

	mu        sync.Mutex
	cond      *sync.Cond
	paused    bool
	blackhole bool
	dropReply bool
	delay     time.Duration
	conns     map[net.Conn]struct{}
	closed    bool

	wg sync.WaitGroup
}

// New starts a proxy on 127.0.0.1 (a free port) forwarding to target
// ("host:port").
func New(target string) (*Proxy, error) { return NewTo("tcp", target) }

// NewTo starts a proxy on 127.0.0.1 (a free port) forwarding to address
// on network ("tcp" or "unix", as net.Dial takes them).
func NewTo(network, address string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, network: network, target: address, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns the proxy's address as an http URL, for etcd endpoints.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Pause stops forwarding in both directions; bytes wait until Resume.
func (p *Proxy) Pause() { p.set(func() { p.paused = true }) }

// Resume undoes Pause, Blackhole and DropReplies.
func (p *Proxy) Resume() {
	p.set(func() { p.paused, p.blackhole, p.dropReply = false, false, false })
}

// Blackhole swallows every byte in both directions until Resume; the
// connections stay open, as in a silent partition.
func (p *Proxy) Blackhole() { p.set(func() { p.blackhole = true }) }

// DropReplies forwards requests but swallows every reply until Resume, so
// the client cannot know whether its requests took effect.
func (p *Proxy) DropReplies() { p.set(func() { p.dropReply = true }) }

// Delay holds every chunk for d before forwarding it (0 turns it off).
func (p *Proxy) Delay(d time.Duration) { p.set(func() { p.delay = d }) }

// ResetConns closes every open connection; new ones are accepted.
func (p *Proxy) ResetConns() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetConns()
	p.wg.Wait()
	return err
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	f()
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(in)
			out, err := net.DialTimeout(p.network, p.target, 5*time.Second)
			if err != nil {
				return
			}
			if !p.track(out) {
				return
			}
			defer p.untrack(out)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(out, in, false); out.Close() }()
			go func() { defer wg.Done(); p.pipe(in, out, true); in.Close() }()
			wg.Wait()
		}()
	}
}

// pipe copies src to dst, applying the faults in force for each chunk.
func (p *Proxy) pipe(dst, src net.Conn, reply bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.paused && !p.closed {
				p.cond.Wait()
			}
			drop := p.blackhole || (reply && p.dropReply)
			delay := p.delay
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if delay > 0 {
				time.Sleep(delay)
			}
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
