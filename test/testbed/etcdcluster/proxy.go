package etcdcluster

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// peerProxy passes the peer traffic addressed to one member (to) to its
// peer listener, unless the cluster's partitions block it. etcd's members
// name themselves in the X-Server-From header of their peer requests
// (raft streams and messages, snapshots), which tells the proxy who is
// talking.
type peerProxy struct {
	c   *Cluster
	to  int
	url string
	srv *http.Server

	mu       sync.Mutex
	inflight map[*flight]struct{}
}

// flight is one request passing through the proxy.
type flight struct {
	// fromID is the sender's etcd id, as its request named it; resolved to
	// a member when cut, since a request may come before the ids are known.
	fromID string
	cancel context.CancelFunc
	// conn is the connection from the member that sent it: closing it ends
	// a raft stream for sure, whatever the proxy is blocked on.
	conn net.Conn
}

type connKey struct{}

// newPeerProxy starts the proxy in front of member to's peer listener
// targetURL, on a port of its own (p.url).
func newPeerProxy(c *Cluster, to int, targetURL string) (*peerProxy, error) {
	target, err := url.Parse(targetURL)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &peerProxy{c: c, to: to, url: "http://" + l.Addr().String(), inflight: map[*flight]struct{}{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // raft streams are long-lived responses
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
		w.WriteHeader(http.StatusBadGateway)
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fromID := r.Header.Get("X-Server-From")
			ctx, cancel := context.WithCancel(r.Context())
			conn, _ := r.Context().Value(connKey{}).(net.Conn)
			f := &flight{fromID: fromID, cancel: cancel, conn: conn}
			// In flight before the check: a partition that starts after the
			// check cuts it (Partition marks, then cuts).
			p.mu.Lock()
			p.inflight[f] = struct{}{}
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				delete(p.inflight, f)
				p.mu.Unlock()
				cancel()
			}()
			if c.blocked(c.memberByID(fromID), to) {
				drop(w)
				return
			}
			rp.ServeHTTP(w, r.WithContext(ctx))
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	go func() {
		if err := p.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return
		}
	}()
	return p, nil
}

// drop closes the connection of a request without an answer, as a network
// that loses it would, only sooner.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// cut ends the requests in flight that match blocked(from, to).
func (p *peerProxy) cut(blocked func(from, to int) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for f := range p.inflight {
		if blocked(p.c.memberByID(f.fromID), p.to) {
			f.cancel()
			if f.conn != nil {
				_ = f.conn.Close()
			}
		}
	}
}

func (p *peerProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
}
