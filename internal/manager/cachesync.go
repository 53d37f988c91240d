package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
)

// listErrors keeps, for each kind the caches hold, the last error of its
// list or watch: what runManager names when the caches have not synced in
// time. A kind that mcsd may not list or watch (a role missing a grant)
// keeps failing, and its error says which grant.
type listErrors struct {
	mu   sync.Mutex
	last map[string]error // by the reflector's type, such as "*v1.Service"
}

// handle records err and logs it as client-go does by default.
func (l *listErrors) handle(ctx context.Context, r *toolscache.Reflector, err error) {
	l.mu.Lock()
	if l.last == nil {
		l.last = map[string]error{}
	}
	l.last[r.TypeDescription()] = err
	l.mu.Unlock()
	toolscache.DefaultWatchErrorHandler(ctx, r, err)
}

// err joins the last error of every kind that had one, in the order of
// their types, or returns nil.
func (l *listErrors) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	kinds := make([]string, 0, len(l.last))
	for k := range l.last {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	errs := make([]error, len(kinds))
	for i, k := range kinds {
		errs[i] = fmt.Errorf("%s: %w", k, l.last[k])
	}
	return errors.Join(errs...)
}

// errCacheSync is the error of controllers whose caches did not sync in
// Options.CacheSyncTimeout.
var errCacheSync = errors.New("the caches have not synced")
