package patch

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writtenFor is how long Written trusts a remembered write over a cache that
// does not show it: a cache is behind by milliseconds, so a status still
// shown as it was before the write after that long was set back by someone
// else, and is written again.
const writtenFor = 10 * time.Second

// Written remembers, by object, the status a reconciler last wrote and the
// status it replaced, until the reconciler's cache shows the write. A
// reconcile that runs before the cache shows its own last write (the write
// of another field of the object brought it) then writes nothing, where it
// would write the same status again. The zero value is ready to use.
type Written struct {
	mu     sync.Mutex
	m      map[types.UID]written
	pruned time.Time
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// written is one status write, the statuses as the API stores them (JSON:
// times to the second, as they are stored).
type written struct {
	from, to string
	at       time.Time
}

// StatusOnce is Status, with w keeping the writes: it writes nothing when
// base shows the status that w's last write for obj replaced, and obj has
// the status written then. It then returns recheck, the time after which
// the write is believed lost: the caller looks again then (a reconcile
// requeued after it), since the event that shows the write, or the one that
// set the status back, may have been the one that brought it. When base
// shows that replaced status and obj has another, the API server holds the
// status written then, not base's: the patch goes from the written one
// (even when obj's status is base's again). status must return values that
// the caller does not modify afterwards.
func StatusOnce[T client.Object](ctx context.Context, c client.Client, w *Written, base, obj T, status func(T) any) (wrote bool, recheck time.Duration, err error) {
	uid := obj.GetUID()
	// Encoded only when needed: not on the path of every reconcile.
	encode := func() (string, string) { return stored(status(base)), stored(status(obj)) }
	if w.has(uid) {
		from, to := encode()
		if recheck := w.pending(uid, from, to); recheck > 0 {
			return false, recheck, nil
		}
		if held, ok := w.holds(uid, from); ok {
			if err := statusFrom(ctx, c, obj, held, to); err != nil {
				return false, 0, err
			}
			w.remember(uid, from, to)
			return true, 0, nil
		}
	}
	wrote, err = Status(ctx, c, base, obj, status)
	if wrote {
		from, to := encode()
		w.remember(uid, from, to)
	}
	return wrote, 0, err
}

// has reports whether w remembers a write of uid.
func (w *Written) has(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[uid]
	return ok
}

// pending returns, when the write of to over from is one w made and the
// cache does not show yet, how long it is trusted still; 0 otherwise.
func (w *Written) pending(uid types.UID, from, to string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.m[uid]
	if !ok {
		return 0
	}
	left := writtenFor - w.clock().Sub(last.at)
	if left <= 0 || from == last.to {
		// Long past, or the cache shows the write: forgotten.
		delete(w.m, uid)
		return 0
	}
	if from != last.from || to != last.to {
		return 0
	}
	return left
}

// holds returns the status w's last write of uid gave it when the cache
// still shows the status that write replaced (from), within writtenFor:
// what the API server holds.
func (w *Written) holds(uid types.UID, from string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.m[uid]
	if !ok || w.clock().Sub(last.at) > writtenFor || last.from != from {
		return "", false
	}
	return last.to, true
}

// statusFrom patches obj's status from held (as stored) to to (obj's, as
// stored), with a JSON merge patch of the status alone.
func statusFrom(ctx context.Context, c client.Client, obj client.Object, held, to string) error {
	diff, err := jsonpatch.CreateMergePatch([]byte(held), []byte(to))
	if err != nil {
		return fmt.Errorf("patch status: %w", err)
	}
	body, err := json.Marshal(map[string]json.RawMessage{"status": diff})
	if err != nil {
		return fmt.Errorf("patch status: %w", err)
	}
	if err := c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("patch status: %w", err)
	}
	return nil
}

func (w *Written) remember(uid types.UID, from, to string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock()
	if w.m == nil {
		w.m = map[types.UID]written{}
	}
	// Writes no reconcile came back to (a status change brings none) go
	// here, at most once a second.
	if now.Sub(w.pruned) > time.Second {
		w.pruned = now
		for k, v := range w.m {
			if now.Sub(v.at) > writtenFor {
				delete(w.m, k)
			}
		}
	}
	w.m[uid] = written{from: from, to: to, at: now}
}

// stored is status as the API stores it.
func stored(status any) string {
	b, err := json.Marshal(status)
	if err != nil {
		return fmt.Sprintf("unencodable %T: %v", status, err)
	}
	return string(b)
}

func (w *Written) clock() time.Time {
	if w.now != nil {
		return w.now()
	}
	return time.Now()
}

// Known returns the status a reconcile of the object uid starts from: the
// status w's last write gave it while the cache (cached) still shows the
// status that write replaced, else cached. It is the one rule for a cache
// that lags behind the reconciler's own writes: decisions that compare with
// the previous status (an event once per change, say) read Known, and do
// not remember what they did beside it.
func Known[S any](w *Written, uid types.UID, cached S) S {
	w.mu.Lock()
	last, ok := w.m[uid]
	w.mu.Unlock()
	if !ok || w.clock().Sub(last.at) > writtenFor || stored(cached) != last.from {
		return cached
	}
	var out S
	if err := json.Unmarshal([]byte(last.to), &out); err != nil {
		return cached
	}
	return out
}
