package patch

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
// statuses it replaced, until the reconciler's cache shows the write. A
// reconcile that runs before the cache shows its own last write (the write
// of another field of the object brought it) then writes nothing, where it
// would write the same status again, and patches any other status from the
// one the API server holds, the last written. The zero value is ready to
// use.
type Written struct {
	mu     sync.Mutex
	m      map[types.UID]written
	pruned time.Time
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// written is one object's writes in a row, the statuses as the API stores
// them (JSON: times to the second, as they are stored).
type written struct {
	// to is the status of the last write; before, the statuses the
	// object had before it, as far as this reconciler knows: the one the
	// first write of the row replaced and those of the writes since. A
	// cache that shows one of them has not shown the last write yet.
	to     string
	before []string
	at     time.Time
}

// maxBefore bounds written.before; a row of more writes than that within
// writtenFor starts again from the cache.
const maxBefore = 8

// StatusOnce is Status, with w keeping the writes. While base shows a
// status that w's writes of obj replaced (the cache is behind them), the
// API server holds the last one written: StatusOnce writes nothing when
// obj has that status, and patches from it otherwise (so a status set back
// to the cache's is written too). When it writes nothing, it returns
// recheck, the time after which the write is believed lost: the caller
// looks again then (a reconcile requeued after it), since the event that
// shows the write, or the one that set the status back, may have been the
// one that brought it. A base showing a status that is not one of w's
// (someone else's) is patched from, as Status does. status must return
// values that the caller does not modify afterwards.
func StatusOnce[T client.Object](ctx context.Context, c client.Client, w *Written, base, obj T, status func(T) any) (wrote bool, recheck time.Duration, err error) {
	uid := obj.GetUID()
	// Encoded only when needed: not on the path of every reconcile.
	encode := func() (string, string) { return stored(status(base)), stored(status(obj)) }
	if w.has(uid) {
		from, to := encode()
		if held, left, ok := w.holds(uid, from); ok {
			if to == held {
				return false, left, nil
			}
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

// holds returns, when the cache shows from and the API server holds the
// status of w's last write of uid instead, that status, and how long the
// write is trusted still (0 when the cache shows that status, which may be
// one of the replaced ones too). It forgets the writes when they are long
// past, when the cache shows the last one and nothing before it did, or
// when the cache shows a status that none of them had (someone else's).
func (w *Written) holds(uid types.UID, from string) (held string, left time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, known := w.m[uid]
	if !known {
		return "", 0, false
	}
	left = writtenFor - w.clock().Sub(last.at)
	replaced := slices.Contains(last.before, from)
	if left <= 0 || !replaced {
		// Long past, caught up, or set by someone else: forgotten.
		delete(w.m, uid)
		return "", 0, false
	}
	if from == last.to {
		left = 0
	}
	return last.to, left, true
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

// remember records a write of to over from, the status the cache showed:
// one more of a row when from is a status the row replaced or wrote.
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
	before := []string{from}
	if last, ok := w.m[uid]; ok && now.Sub(last.at) <= writtenFor && (slices.Contains(last.before, from) || from == last.to) {
		before = append(slices.Clone(last.before), last.to)
		if len(before) > maxBefore {
			before = before[len(before)-maxBefore:]
		}
	}
	w.m[uid] = written{to: to, before: before, at: now}
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
// status w's last write gave it while the cache (cached) still shows one of
// the statuses w's writes replaced, else cached. It is the one rule for a cache
// that lags behind the reconciler's own writes: decisions that compare with
// the previous status (an event once per change, say) read Known, and do
// not remember what they did beside it.
func Known[S any](w *Written, uid types.UID, cached S) S {
	w.mu.Lock()
	last, ok := w.m[uid]
	w.mu.Unlock()
	if !ok || w.clock().Sub(last.at) > writtenFor || !slices.Contains(last.before, stored(cached)) {
		return cached
	}
	var out S
	if err := json.Unmarshal([]byte(last.to), &out); err != nil {
		return cached
	}
	return out
}
