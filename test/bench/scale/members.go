package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

// A simulated member is what a controller does with the registry, without
// Kubernetes: the real etcd backend over a client of its own (its lease and
// alive record, Publish and PutEndpoints of records shaped like real ones,
// its own Watch decoded as a controller decodes it), feeding a real
// clusterset.View where memory allows. It does not: read or write a
// Kubernetes API, reconcile imports, run kube-proxy or DNS.

// member is one simulated cluster.
type member struct {
	id      string
	reg     registry.Registry
	calls   *callCounter     // the etcd client's requests; nil on Cloud Map
	view    *clusterset.View // nil: the member only decodes and counts
	cancel  context.CancelFunc
	watched chan struct{} // closed when the watch ended

	mu        sync.Mutex
	seen      map[registry.RecordID]bool // endpoint records delivered
	latencies []time.Duration            // other clusters' endpoint changes, put → delivered
	measuring bool
	deletions int // records delivered as deleted
	down      int // OnConnection(false) reports
	gone      map[string]time.Time
	// arrived is when each address of other clusters' endpoints was first
	// delivered while measuring.
	arrived map[string]time.Time
	waiting bool      // for the next delivery of records (mark)
	marked  time.Time // when it came
}

// callCounter counts the requests a client sends: unary calls, and every
// message sent on a stream (a watch created or asked for progress, a lease
// keep-alive). It also counts the reads of the clusterset (ranges of more
// than one key, not counts only), and the bytes of every response the
// client receives, unary or on a stream.
type callCounter struct{ n, reads, bytes atomic.Int64 }

// sized is a protobuf message of etcd's API.
type sized interface{ Size() int }

func (c *callCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.n.Add(1)
	if r, ok := req.(*etcdserverpb.RangeRequest); ok && len(r.RangeEnd) > 0 && !r.CountOnly {
		c.reads.Add(1)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if m, ok := reply.(sized); ok && err == nil {
		c.bytes.Add(int64(m.Size()))
	}
	return err
}

func (c *callCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: s, c: c}, nil
}

type countedStream struct {
	grpc.ClientStream
	c *callCounter
}

func (s *countedStream) SendMsg(m any) error {
	s.c.n.Add(1)
	return s.ClientStream.SendMsg(m)
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if x, ok := m.(sized); ok && err == nil {
		s.c.bytes.Add(int64(x.Size()))
	}
	return err
}

// startEtcdMember opens a member's etcd backend, as a controller opens it,
// with its requests counted, and its watch.
func startEtcdMember(ctx context.Context, id, set string, urls []string, ttl time.Duration, withView bool) (*member, error) {
	calls := &callCounter{}
	reg, err := etcd.New(ctx, etcd.Options{Identity: registry.Identity{ClusterSet: set, Cluster: id}, TTL: ttl, Endpoints: urls,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(calls.unary), grpc.WithChainStreamInterceptor(calls.stream)}})
	if err != nil {
		return nil, fmt.Errorf("backend of %s: %w", id, err)
	}
	m := startMember(ctx, id, reg, withView)
	m.calls = calls
	return m, nil
}

// startMember starts the watch of a member whose backend is reg.
func startMember(ctx context.Context, id string, reg registry.Registry, withView bool) *member {
	m := &member{id: id, reg: reg, seen: map[registry.RecordID]bool{}, gone: map[string]time.Time{}, arrived: map[string]time.Time{}, watched: make(chan struct{})}
	if withView {
		m.view = clusterset.NewView()
	}
	wctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	go func() {
		defer close(m.watched)
		_ = reg.Watch(wctx, m)
	}()
	return m
}

// OnUpdate implements registry.Handler.
func (m *member) OnUpdate(u registry.Update) {
	if m.view != nil {
		m.view.OnUpdate(u)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if u.Full {
		m.seen = map[registry.RecordID]bool{}
	}
	if m.waiting && (u.Full || len(u.Endpoints) > 0) {
		m.waiting, m.marked = false, now
	}
	for _, e := range u.Endpoints {
		m.seen[registry.RecordID{Cluster: e.Cluster, Service: e.Service}] = true
		if m.measuring && e.Cluster != m.id && !e.Updated.IsZero() {
			m.latencies = append(m.latencies, now.Sub(e.Updated))
		}
		if m.measuring && e.Cluster != m.id {
			for _, g := range e.Groups {
				for _, ep := range g.Endpoints {
					for _, a := range ep.Addresses {
						if _, ok := m.arrived[a]; !ok {
							m.arrived[a] = now
						}
					}
				}
			}
		}
	}
	for _, id := range u.DeletedEndpoints {
		delete(m.seen, id)
	}
	m.deletions += len(u.DeletedEndpoints) + len(u.DeletedExports)
	for _, c := range u.DeletedClusters {
		if _, ok := m.gone[c]; !ok {
			m.gone[c] = now
		}
	}
}

// OnConnection implements registry.Handler.
func (m *member) OnConnection(connected bool, _ error) {
	if !connected {
		m.mu.Lock()
		m.down++
		m.mu.Unlock()
	}
}

func (m *member) records() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

func (m *member) stats() (deletions, down int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deletions, m.down
}

// traffic is how often the member has read the clusterset, and how many
// bytes of responses it received (zero on Cloud Map).
func (m *member) traffic() (reads, bytes int64) {
	if m.calls == nil {
		return 0, 0
	}
	return m.calls.reads.Load(), m.calls.bytes.Load()
}

func (m *member) measure(on bool) []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.measuring = on
	out := m.latencies
	m.latencies = nil
	return out
}

// mark starts waiting for the next delivery of records; markedAt tells
// when it came.
func (m *member) mark() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waiting, m.marked = true, time.Time{}
}

func (m *member) markedAt() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.marked, !m.marked.IsZero()
}

func (m *member) goneAt(cluster string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.gone[cluster]
	return t, ok
}

// stop ends the member as a crashed controller ends: the watch and the
// client go, its records stay until its lease expires.
func (m *member) stop() {
	m.cancel()
	<-m.watched
	_ = m.reg.Close()
}
