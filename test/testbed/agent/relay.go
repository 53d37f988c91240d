package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The node namespace has no route to the host, where the API server
// listens on 127.0.0.1. The relay joins them through a Unix socket, which
// both namespaces see in the file system: in the node namespace, a listener
// on the API server's own address (so its kubeconfig and certificate serve
// unchanged) forwards to the socket; on the host, the agent forwards the
// socket to the API server.

func (a *Agent) relaySocket() string { return filepath.Join(a.cfg.SocketDir, "api.sock") }

func (a *Agent) startRelay(ctx context.Context) error {
	sock := a.relaySocket()
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("relay socket: %w", err)
	}
	go func() { <-ctx.Done(); _ = l.Close() }()
	go Forward(l, func() (net.Conn, error) { return net.Dial("tcp", a.cfg.APIAddr) })
	a.children.run(ctx, "relay", filepath.Join(a.cfg.StateDir, "relay.log"), func() *exec.Cmd {
		return exec.Command("ip", "netns", "exec", a.cfg.NodeNetns, a.progs.Self, "relay", "-listen", a.cfg.APIAddr, "-to", sock)
	}, nil)
	// The same port on node 0's address is the kubernetes Service's
	// endpoint (the API server advertises it): pods' in-cluster clients
	// reach the API server through the Service's cluster IP.
	_, port, err := net.SplitHostPort(a.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("API address %q: %w", a.cfg.APIAddr, err)
	}
	nodeAddr := net.JoinHostPort(a.cfg.Nodes[0].IPs[0], port)
	a.children.run(ctx, "relay-service", filepath.Join(a.cfg.StateDir, "relay.log"), func() *exec.Cmd {
		return exec.Command("ip", "netns", "exec", a.cfg.NodeNetns, a.progs.Self, "relay", "-listen", nodeAddr, "-to", sock)
	}, nil)
	return nil
}

// Forward accepts connections on l and copies each, both ways, to a
// connection from dial, until l is closed.
func Forward(l net.Listener, dial func() (net.Conn, error)) {
	for {
		in, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(50 * time.Millisecond) // out of file descriptors, say: do not spin
			continue
		}
		go func() {
			defer func() { _ = in.Close() }()
			out, err := dial()
			if err != nil {
				return
			}
			defer func() { _ = out.Close() }()
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); closeWrite(out) }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); closeWrite(in) }()
			wg.Wait()
		}()
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// RunRelay is the node side: it listens on TCP address listen and forwards
// to the Unix socket to.
func RunRelay(listen, to string) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("relay listen: %w", err)
	}
	if !strings.HasPrefix(to, "/") {
		return fmt.Errorf("relay: %q is not a socket path", to)
	}
	Forward(l, func() (net.Conn, error) { return net.Dial("unix", to) })
	return nil
}
