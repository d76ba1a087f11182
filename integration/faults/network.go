package faults

import (
	"context"
	"strings"
	"time"

	"github.com/fencekit/fencekit/internal/faultproxy"
)

// Proxy is a loopback TCP proxy that sits between a client and one server
// and can pause, blackhole, delay or drop the replies of the traffic through
// it. Point a client at Proxy.URL instead of the server to put it behind
// the proxy. It is safe for concurrent use; Close it when done.
type Proxy struct {
	p *faultproxy.Proxy
}

// NewProxy starts a Proxy on a free loopback port forwarding to target,
// given as "host:port" or as an etcd client URL: http:// or https://
// host:port, or unix:// or unixs:// and a socket path. The proxy forwards
// bytes and does not look at them, so TLS passes through it.
func NewProxy(target string) (*Proxy, error) {
	network, address := "tcp", target
	for _, scheme := range []string{"unix://", "unixs://"} {
		if path, ok := strings.CutPrefix(target, scheme); ok {
			network, address = "unix", path
		}
	}
	for _, scheme := range []string{"http://", "https://"} {
		if addr, ok := strings.CutPrefix(target, scheme); ok {
			address = addr
		}
	}
	p, err := faultproxy.NewTo(network, address)
	if err != nil {
		return nil, err
	}
	return &Proxy{p: p}, nil
}

// Addr returns the proxy's "host:port".
func (p *Proxy) Addr() string { return p.p.Addr() }

// URL returns the proxy's address as an http URL, for etcd endpoints.
func (p *Proxy) URL() string { return p.p.URL() }

// Pause stops forwarding in both directions; bytes wait until Resume.
func (p *Proxy) Pause() { p.p.Pause() }

// Resume undoes Pause, Blackhole and DropReplies.
func (p *Proxy) Resume() { p.p.Resume() }

// Blackhole swallows every byte in both directions until Resume; the
// connections stay open, as in a silent partition.
func (p *Proxy) Blackhole() { p.p.Blackhole() }

// DropReplies forwards requests but swallows every reply until Resume, so
// the client cannot know whether its requests took effect.
func (p *Proxy) DropReplies() { p.p.DropReplies() }

// Delay holds every chunk for d before forwarding it (0 turns it off).
func (p *Proxy) Delay(d time.Duration) { p.p.Delay(d) }

// ResetConns closes every open connection; new ones are accepted.
func (p *Proxy) ResetConns() { p.p.ResetConns() }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error { return p.p.Close() }

// Partition cuts the links through proxies: every byte in both directions
// is swallowed while the connections stay open, as in a silent network
// partition, so the client sees time-outs, not errors. Heal restores the
// links and resets their connections (bytes were lost mid-stream, so the
// client must reconnect).
func Partition(proxies ...*Proxy) Fault {
	return &funcFault{
		kind:   KindPartition,
		inject: each(proxies, true, (*Proxy).Blackhole),
		heal:   each(proxies, false, (*Proxy).Resume, (*Proxy).ResetConns),
	}
}

// LostReplies forwards the requests through proxies but drops every reply:
// the requests take effect on the server and the client cannot know it,
// so every outcome is ambiguous. Heal restores the links and resets their
// connections.
func LostReplies(proxies ...*Proxy) Fault {
	return &funcFault{
		kind:   KindLostReplies,
		inject: each(proxies, true, (*Proxy).DropReplies),
		heal:   each(proxies, false, (*Proxy).Resume, (*Proxy).ResetConns),
	}
}

// SlowLink holds every chunk of data through proxies for d before
// forwarding it, in both directions. Heal removes the delay.
func SlowLink(d time.Duration, proxies ...*Proxy) Fault {
	return &funcFault{
		kind:   KindDelay,
		inject: each(proxies, true, func(p *Proxy) { p.Delay(d) }),
		heal:   each(proxies, false, func(p *Proxy) { p.Delay(0) }),
	}
}

// SwitchMember makes a client whose proxies lead to different members of
// one cluster reconnect to another member: it cuts the links through cut,
// as Partition does, and resets the connections through keep, so that the
// client must dial again and re-establish its streams (watches, lease
// keep-alives) on the member behind keep, the only one it can reach.
// Requests the client sends on a cut link meanwhile time out. Heal
// restores the cut links and resets their connections.
func SwitchMember(keep *Proxy, cut ...*Proxy) Fault {
	return &funcFault{
		kind: KindMemberSwitch,
		inject: func(ctx context.Context) error {
			if keep == nil || len(cut) == 0 {
				return ErrNoTarget
			}
			if err := each(cut, true, (*Proxy).Blackhole)(ctx); err != nil {
				return err
			}
			keep.ResetConns()
			return nil
		},
		heal: each(cut, false, (*Proxy).Resume, (*Proxy).ResetConns),
	}
}

// each returns a step applying fs to every proxy in turn. An inject step
// with no proxies reports ErrNoTarget; a heal step does nothing.
func each(proxies []*Proxy, inject bool, fs ...func(*Proxy)) func(context.Context) error {
	return func(context.Context) error {
		if inject && len(proxies) == 0 {
			return ErrNoTarget
		}
		for _, f := range fs {
			for _, p := range proxies {
				f(p)
			}
		}
		return nil
	}
}
