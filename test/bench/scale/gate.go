package main

import (
	"errors"
	"io"
	"net"
	"sync"
)

// gate passes TCP connections to the registry, and can cut them all off
// for a while: the members and real clusters reach the single-member
// registry through it, so that the compaction phase can hold them off while
// the registry moves on without them.
type gate struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// startGate listens on a port of its own and passes each connection to
// target (host:port).
func startGate(target string) (*gate, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gate{l: l, target: target, conns: map[net.Conn]struct{}{}}
	g.wg.Go(g.serve)
	return g, nil
}

// url is the gate's address as an etcd client URL.
func (g *gate) url() string { return "http://" + g.l.Addr().String() }

func (g *gate) serve() {
	for {
		in, err := g.l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		g.wg.Go(func() { g.pass(in) })
	}
}

// pass copies between in and a new connection to the target until either
// ends, or the gate cuts them.
func (g *gate) pass(in net.Conn) {
	defer func() { _ = in.Close() }()
	out, err := net.Dial("tcp", g.target)
	if err != nil {
		return
	}
	defer func() { _ = out.Close() }()
	if !g.track(in, out) {
		return
	}
	defer g.untrack(in, out)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
}

// track remembers the connections of one passage, unless the gate is cut.
func (g *gate) track(conns ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cut {
		return false
	}
	for _, c := range conns {
		g.conns[c] = struct{}{}
	}
	return true
}

func (g *gate) untrack(conns ...net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range conns {
		delete(g.conns, c)
	}
}

// close cuts every connection and refuses new ones until open.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut = true
	for c := range g.conns {
		_ = c.Close()
	}
}

// open lets connections through again.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut = false
}

// stop ends the gate and every connection through it.
func (g *gate) stop() {
	_ = g.l.Close()
	g.close()
	g.wg.Wait()
}
