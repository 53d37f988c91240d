package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/internal/lifetime"
)

// errResync ends following the watch when the watch failed but etcd may
// still be readable: the next full read tells.
var errResync = errors.New("watch ended")

// Watch delivers the clusterset's records to h until ctx is done or the
// backend is closed. It logs to the logger of ctx, or else of New's ctx.
func (b *Backend) Watch(ctx context.Context, h registry.Handler) error {
	return b.watch(ctx, h)
}

func (c *conn) watch(ctx context.Context, h registry.Handler) error {
	ctx, release, err := lifetime.Bind(ctx, c.ctx)
	if err != nil {
		return err
	}
	defer release()

	log := c.log // the logger the backend was opened with
	if l, err := logr.FromContext(ctx); err == nil {
		log = l.WithValues(logValues(c.opts.Identity)...)
	}
	w := &watch{c: c, h: h, log: log}
	w.run(ctx)
	if c.ctx.Err() != nil {
		return registry.ErrClosed
	}
	return ctx.Err()
}

// watch is one call of Watch.
type watch struct {
	c   *conn
	h   registry.Handler
	log logr.Logger
	// connected is nil until the first read succeeds or fails.
	connected *bool
}

// run reads everything, follows changes, and starts again after any
// failure, until ctx is done.
func (w *watch) run(ctx context.Context) {
	delay := retryMin
	for ctx.Err() == nil {
		rev, err := w.sync(ctx)
		if err == nil {
			w.setConnected(true, nil)
			started := time.Now()
			err = w.follow(ctx, rev)
			if time.Since(started) > retryMax {
				delay = retryMin
			}
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errResync) {
			w.log.Info("watch ended, reading all records again", "reason", err.Error())
		} else {
			w.setConnected(false, err)
		}
		if !sleep(ctx, delay) {
			return
		}
		delay = nextDelay(delay)
	}
}

func (w *watch) setConnected(connected bool, err error) {
	if w.connected != nil && *w.connected == connected {
		return
	}
	w.connected = &connected
	if connected {
		w.log.Info("registry connected")
	} else {
		w.log.Error(err, "registry disconnected")
	}
	w.h.OnConnection(connected, err)
}

// sync delivers every record of the clusterset as one full Update and
// returns the revision it read at.
func (w *watch) sync(ctx context.Context) (int64, error) {
	resp, err := w.read(ctx, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("read clusterset: %w", err)
	}
	u := registry.Update{Full: true}
	for _, kv := range resp.Kvs {
		w.addPut(&u, kv)
	}
	w.h.OnUpdate(u)
	return resp.Header.Revision, nil
}

// follow delivers the changes after rev, one Update per watch response,
// until the watch fails, etcd cannot be read, the watch falls behind, or
// ctx is done.
//
// Every HealthInterval without a watch response, a linearizable read checks
// that etcd has a leader and a quorum, and asks the watch's member for its
// progress. A watch whose member is cut off from the others (a partition)
// gets no events, and etcd may not end it: a watch that is behind the
// revision a read saw and has not moved at all over two checks is started
// again (on another member, most likely). One check is not enough: etcd
// drops a progress request while the stream has a watch still catching up,
// and a healthy member may apply a little late.
func (w *watch) follow(ctx context.Context, rev int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wctx := clientv3.WithRequireLeader(ctx)
	// Watch blocks until etcd has created the watch; check health meanwhile.
	created := make(chan clientv3.WatchChan, 1)
	go func() {
		created <- w.c.cli.Watch(wctx, w.c.keys.clusters(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	}()
	var ch clientv3.WatchChan
	// reached is the revision the watch is known to have reached; due, the
	// one it was behind at the last check, and stuck how many checks in a
	// row it has been behind without moving.
	reached, due := rev, int64(0)
	var stuck int
	var reachedAtCheck int64
	health := time.NewTimer(w.c.opts.HealthInterval)
	defer health.Stop()
	for {
		select {
		case ch = <-created:
			created = nil
		case resp, ok := <-ch:
			if !ok {
				return fmt.Errorf("%w: channel closed", errResync)
			}
			if err := resp.Err(); err != nil {
				// Compacted, canceled, or no leader.
				return fmt.Errorf("%w: %w", errResync, err)
			}
			reached = max(reached, resp.Header.Revision)
			if u := w.changes(resp.Events); !u.Empty() {
				w.h.OnUpdate(u)
			}
			health.Reset(w.c.opts.HealthInterval)
		case <-health.C:
			switch {
			case due > reached && reached == reachedAtCheck:
				stuck++
			default:
				stuck = 0
			}
			if stuck >= 2 {
				return fmt.Errorf("%w: the watch is stuck at revision %d, etcd is at %d or later", errResync, reached, due)
			}
			reachedAtCheck = reached
			resp, err := w.read(ctx, clientv3.WithCountOnly())
			if err != nil {
				return fmt.Errorf("health check: %w", err)
			}
			due = 0
			if ch != nil && resp.Header.Revision > reached {
				// The watch's member answers with a progress notification
				// at its revision. The request goes to the watch's stream,
				// which the client finds by wctx's metadata (the
				// require-leader flag): a context without it would ask an
				// empty stream of its own.
				due = resp.Header.Revision
				pctx, cancel := context.WithTimeout(wctx, w.c.opts.HealthInterval)
				if err := w.c.cli.RequestProgress(pctx); err != nil {
					w.log.V(1).Info("watch progress request failed", "reason", err.Error())
				}
				cancel()
			}
			health.Reset(w.c.opts.HealthInterval)
		}
	}
}

// read reads the clusterset's keys (linearizable), trying each member's
// turn (eachMember).
func (w *watch) read(ctx context.Context, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	var resp *clientv3.GetResponse
	err := w.c.eachMember(ctx, func(ctx context.Context) error {
		var err error
		resp, err = w.c.cli.Get(ctx, w.c.keys.clusters(), opts...)
		return err
	})
	return resp, err
}

// changes turns watch events into an Update. A key changed more than once
// in the batch counts with its last change only.
func (w *watch) changes(events []*clientv3.Event) registry.Update {
	last := make(map[string]int, len(events))
	for i, ev := range events {
		last[string(ev.Kv.Key)] = i
	}
	var u registry.Update
	for i, ev := range events {
		if last[string(ev.Kv.Key)] != i {
			continue
		}
		if ev.Type == mvccpb.DELETE {
			w.addDelete(&u, ev.Kv)
		} else {
			w.addPut(&u, ev.Kv)
		}
	}
	return u
}

func (w *watch) addPut(u *registry.Update, kv *mvccpb.KeyValue) {
	kind, cluster, svc := w.c.keys.parse(string(kv.Key))
	switch kind {
	case kindAlive:
		c := registry.Cluster{ID: cluster}
		var v aliveValue
		if err := json.Unmarshal(kv.Value, &v); err == nil {
			c.Since = v.Since
			c.TTL = time.Duration(v.TTLSeconds) * time.Second
		}
		u.Clusters = append(u.Clusters, c)
	case kindExport:
		var v exportValue
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			w.log.Error(err, "ignoring unreadable record", "key", string(kv.Key))
			return
		}
		u.Exports = append(u.Exports, registry.Export{Cluster: cluster, Service: svc, Spec: v.Spec, Order: kv.CreateRevision})
	case kindEndpoints:
		var v endpointsValue
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			w.log.Error(err, "ignoring unreadable record", "key", string(kv.Key))
			return
		}
		u.Endpoints = append(u.Endpoints, registry.Endpoints{Cluster: cluster, Service: svc, Groups: v.Groups, Updated: v.Updated})
	default:
		w.log.V(1).Info("ignoring unknown key", "key", string(kv.Key))
	}
}

func (w *watch) addDelete(u *registry.Update, kv *mvccpb.KeyValue) {
	kind, cluster, svc := w.c.keys.parse(string(kv.Key))
	switch kind {
	case kindAlive:
		u.DeletedClusters = append(u.DeletedClusters, cluster)
	case kindExport:
		u.DeletedExports = append(u.DeletedExports, registry.RecordID{Cluster: cluster, Service: svc})
	case kindEndpoints:
		u.DeletedEndpoints = append(u.DeletedEndpoints, registry.RecordID{Cluster: cluster, Service: svc})
	}
}
