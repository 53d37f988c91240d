package manager

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/mcsd-io/mcsd/internal/controller/kind"
)

// listErrors keeps the informers of the caches (newInformer makes them)
// and the last error of each one's list or watch: what runManager says
// when the caches have not synced in time. A kind that mcsd may not list
// or watch (a role missing a grant) keeps failing, and its error says
// which grant; a kind whose first list never returns (an API server or an
// aggregated API that does not answer) is named too.
type listErrors struct {
	mu        sync.Mutex
	informers []*informerState
}

// informerState is one informer of the caches and its last list or watch
// error.
type informerState struct {
	kind string
	inf  toolscache.SharedIndexInformer
	err  error
}

// newInformer makes an informer as the cache does by default
// (cache.Options.NewInformer), and keeps it with its errors: its watch
// error handler records each and logs it as client-go does by default.
func (l *listErrors) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	inf := toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	s := &informerState{kind: kindOf(obj), inf: inf}
	// Set before the informer runs, which is the one case it can fail in.
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *toolscache.Reflector, err error) {
		l.mu.Lock()
		s.err = err
		l.mu.Unlock()
		toolscache.DefaultWatchErrorHandler(ctx, r, err)
	})
	l.mu.Lock()
	l.informers = append(l.informers, s)
	l.mu.Unlock()
	return inf
}

// kindOf names obj's type as client-go's reflector does ("*v1.Service"),
// with the kind of a metadata-only object.
func kindOf(obj runtime.Object) string {
	name := reflect.TypeOf(obj).String()
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		if kind := obj.GetObjectKind().GroupVersionKind().Kind; kind != "" {
			name += " (" + kind + ")"
		}
	}
	return name
}

// err says why the caches have not synced in timeout: each informer that
// has not, by type, with the last error of its list or watch when it has
// not listed since (one that has is not named for its errors), or that
// its first list has not returned, none having failed. It is errCacheSync,
// with a hint at mcsd's RBAC when the API server refused a list or a
// watch.
func (l *listErrors) err(timeout time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lines []string
	forbidden := false
	for _, s := range l.informers {
		listed := s.inf.LastSyncResourceVersion() != ""
		switch {
		case s.inf.HasSynced():
		case !listed && s.err != nil:
			lines = append(lines, fmt.Sprintf("%s: %v", s.kind, s.err))
			forbidden = forbidden || apierrors.IsForbidden(s.err)
		case !listed:
			lines = append(lines, s.kind+": its first list has not returned, and no list or watch of it failed")
		default:
			lines = append(lines, s.kind+": listed, and its objects not yet taken in")
		}
	}
	slices.Sort(lines)
	switch {
	case len(lines) == 0:
		return fmt.Errorf("%w in %s: no list or watch failed, they were slow", errCacheSync, timeout)
	case forbidden:
		return fmt.Errorf("%w in %s (is a grant of mcsd's RBAC missing?): %s", errCacheSync, timeout, strings.Join(lines, "; "))
	}
	return fmt.Errorf("%w in %s: %s", errCacheSync, timeout, strings.Join(lines, "; "))
}

// synced reports whether every informer made so far has synced: listed,
// and given that list to its store.
func (l *listErrors) synced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.informers {
		if !s.inf.HasSynced() {
			return false
		}
	}
	return true
}

// quickSync is a cache whose wait for its caches' sync looks at its
// informers every poll (synced), where controller-runtime's looks every
// 100 ms (client-go's WaitForCacheSync). The manager starts the
// controllers once that wait returns: with a registry read in a few
// milliseconds, as a small clusterset's is, the controllers started
// about 100 ms after the caches had synced (docs/performance.md).
// synced covers every informer the cache has made: mcsd removes none
// (cache.RemoveInformer), which would keep one that had not synced in it
// for good, and the wait with it.
type quickSync struct {
	cache.Cache
	synced func() bool
	poll   time.Duration
}

// WaitForCacheSync waits until every informer has synced, then returns
// what the cache's own wait does: at once, unless an informer was made
// meanwhile (then at its next look, within 100 ms). It returns false when
// ctx ends first.
func (q quickSync) WaitForCacheSync(ctx context.Context) bool {
	err := wait.PollUntilContextCancel(ctx, q.poll, true, func(context.Context) (bool, error) {
		return q.synced(), nil
	})
	return err == nil && q.Cache.WaitForCacheSync(ctx)
}

// newQuickSync returns the manager's NewCache: controller-runtime's cache,
// as quickSync over the informers l keeps.
func newQuickSync(l *listErrors) cache.NewCacheFunc {
	return func(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
		c, err := cache.New(cfg, o)
		if err != nil {
			return nil, fmt.Errorf("create cache: %w", err)
		}
		return quickSync{Cache: c, synced: l.synced, poll: kind.SyncPoll}, nil
	}
}

// errCacheSync is the error of controllers whose caches did not sync in
// Options.CacheSyncTimeout.
var errCacheSync = errors.New("the caches have not synced")
