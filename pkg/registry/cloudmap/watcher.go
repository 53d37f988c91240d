package cloudmap

import (
	"context"
	"fmt"
	"sync"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

var _ registry.ReadOnlyWatcher = (*Watcher)(nil)

// Watcher reads a clusterset without being a member of it: it writes no
// heartbeat, creates no namespace or service and registers nothing, so no
// watcher of the clusterset sees it. Its Watch is a Backend's, with the
// heartbeat service found by listing the system namespace.
type Watcher struct {
	*reader
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// NewWatcher builds a Cloud Map client (see NewClient) and opens a
// read-only watcher of opts.Identity.ClusterSet; opts.Identity.Cluster may
// be empty. It takes its logger from ctx, which bounds building the client.
// It calls no Cloud Map API: Watch reports whether Cloud Map can be read.
func NewWatcher(ctx context.Context, opts Options) (*Watcher, error) {
	opts.Default()
	if err := opts.ValidateWatcher(); err != nil {
		return nil, fmt.Errorf("cloudmap registry options: %w", err)
	}
	client, err := NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	return newWatcher(ctx, client, opts), nil
}

// NewWatcherFromAPI opens a read-only watcher over api. The client fields of
// opts are ignored.
func NewWatcherFromAPI(ctx context.Context, api API, opts Options) (*Watcher, error) {
	opts.Default()
	if err := opts.ValidateWatcher(); err != nil {
		return nil, fmt.Errorf("cloudmap registry options: %w", err)
	}
	return newWatcher(ctx, api, opts), nil
}

func newWatcher(ctx context.Context, api API, opts Options) *Watcher {
	r, cancel := newReader(ctx, api, opts)
	return &Watcher{reader: r, cancel: cancel}
}

// Watch polls Cloud Map and delivers the clusterset's records to h until
// ctx is done or the watcher is closed, as Backend.Watch does.
func (w *Watcher) Watch(ctx context.Context, h registry.Handler) error {
	return w.watch(ctx, h)
}

// Close stops the watches.
func (w *Watcher) Close() error {
	w.closeOnce.Do(w.cancel)
	return nil
}
