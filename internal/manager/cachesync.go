package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
)

// listErrors keeps, for each informer of the caches, the last error of its
// list or watch: what runManager says when the caches have not synced in
// time. A kind that mcsd may not list or watch (a role missing a grant)
// keeps failing, and its error says which grant.
type listErrors struct {
	mu   sync.Mutex
	last map[*toolscache.Reflector]error
}

// handle records err and logs it as client-go does by default.
func (l *listErrors) handle(ctx context.Context, r *toolscache.Reflector, err error) {
	l.mu.Lock()
	if l.last == nil {
		l.last = map[*toolscache.Reflector]error{}
	}
	l.last[r] = err
	l.mu.Unlock()
	toolscache.DefaultWatchErrorHandler(ctx, r, err)
}

// err says why the caches have not synced in timeout: the last error of
// each informer that has not listed since (one that has is synced, whatever
// it met before), by type. It is errCacheSync, with a hint at mcsd's RBAC
// when the API server refused a list or a watch.
func (l *listErrors) err(timeout time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var lines []string
	forbidden := false
	for r, err := range l.last {
		if r.LastSyncResourceVersion() != "" {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %v", r.TypeDescription(), err))
		forbidden = forbidden || apierrors.IsForbidden(err)
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

// errCacheSync is the error of controllers whose caches did not sync in
// Options.CacheSyncTimeout.
var errCacheSync = errors.New("the caches have not synced")
