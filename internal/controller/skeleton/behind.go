package skeleton

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// BehindMin and BehindMax bound the waits of Behind.
const (
	BehindMin = 100 * time.Millisecond
	BehindMax = 5 * time.Second
)

// Behind spaces out the looks again at an object whose reconciles keep
// finding their cache behind the API server (a write refused for an object
// the cache does not show yet, or shows older than it is). Each such look
// may cost an API call, and a cache far behind (an API server restarted
// under the controller) would otherwise bring one per object every
// BehindMin. The wait doubles from BehindMin on each reconcile of the same
// object that finds its cache behind again, up to BehindMax, with the
// workqueue's per-item limiter; Forget, for a reconcile that did not,
// starts again from BehindMin. The object's own event, once the cache has
// it, brings the object back sooner, unless it is the echo of the
// controller's write (package echo). The zero value is ready to use.
type Behind struct {
	once    sync.Once
	limiter workqueue.TypedRateLimiter[types.NamespacedName]
}

// When is how long to wait before looking at key again, its cache found
// behind once more.
func (b *Behind) When(key types.NamespacedName) time.Duration { return b.get().When(key) }

// Forget starts key's waits again from BehindMin.
func (b *Behind) Forget(key types.NamespacedName) { b.get().Forget(key) }

func (b *Behind) get() workqueue.TypedRateLimiter[types.NamespacedName] {
	b.once.Do(func() {
		b.limiter = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](BehindMin, BehindMax)
	})
	return b.limiter
}
