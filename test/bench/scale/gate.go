package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
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

// gateEnv, set to the registry's address (host:port), makes this program
// the registry's gate (maybeRunGate) instead of the benchmark.
const gateEnv = "MCSD_BENCH_SCALE_GATE"

// maybeRunGate runs this process as the registry's gate when gateEnv is
// set, and exits when its standard input ends: it writes its URL as its
// first line, then cuts every connection on a line "close" and lets them
// through again on a line "open", each answered by a line "ok".
func maybeRunGate() {
	target := os.Getenv(gateEnv)
	if target == "" {
		return
	}
	g, err := startGate(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale gate:", err)
		os.Exit(1)
	}
	fmt.Println(g.url())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "close":
			g.close()
		case "open":
			g.open()
		}
		fmt.Println("ok")
	}
	g.stop()
	os.Exit(0)
}

// gateProcess is the registry's gate run as a process of its own: in
// the benchmark's process, every event etcd sent a real cluster's
// controller waited for that process's goroutines (the simulated members'
// watches, over a heap of gigabytes), a delay no controller has in
// production.
type gateProcess struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	addr string

	mu sync.Mutex
}

// startGateProcess starts this program as the gate of target (host:port).
func startGateProcess(target string) (*gateProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), gateEnv+"="+target)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("gate's input: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("gate's output: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the gate: %w", err)
	}
	g := &gateProcess{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	if !g.out.Scan() {
		_ = in.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the gate gave no address: %w", errors.Join(g.out.Err(), io.ErrUnexpectedEOF))
	}
	g.addr = g.out.Text()
	return g, nil
}

// url is the gate's address as an etcd client URL.
func (g *gateProcess) url() string { return g.addr }

// pid is the gate's process.
func (g *gateProcess) pid() int { return g.cmd.Process.Pid }

// tell sends the gate a command and waits for its answer.
func (g *gateProcess) tell(command string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := fmt.Fprintln(g.in, command); err != nil {
		return fmt.Errorf("tell the gate %s: %w", command, err)
	}
	if !g.out.Scan() || g.out.Text() != "ok" {
		return fmt.Errorf("the gate did not answer %s: %w", command, errors.Join(g.out.Err(), io.ErrUnexpectedEOF))
	}
	return nil
}

// close cuts every connection and refuses new ones until open.
func (g *gateProcess) close() error { return g.tell("close") }

// open lets connections through again.
func (g *gateProcess) open() error { return g.tell("open") }

// stop ends the gate and every connection through it.
func (g *gateProcess) stop() {
	_ = g.in.Close()
	_ = g.cmd.Wait()
}
