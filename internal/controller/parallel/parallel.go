// Package parallel runs the independent API writes of one reconcile at the
// same time, for latency: the only place under internal/controller that
// starts goroutines. Each function gets its inputs when it is made and
// returns its result; none writes state the other reads.
package parallel

import (
	"sync"

	"golang.org/x/sync/errgroup"
)

// Both runs a and b at the same time, waits for both, and returns their
// results and errors.
func Both[A, B any](a func() (A, error), b func() (B, error)) (A, error, B, error) { //nolint:revive // two results, each with its error
	var (
		ra   A
		errA error
		wg   sync.WaitGroup
	)
	wg.Go(func() { ra, errA = a() })
	rb, errB := b()
	wg.Wait()
	return ra, errA, rb, errB
}

// Each runs fns, at most limit at a time, waits for all, and returns each
// one's result and error, in the order of fns.
func Each[T any](limit int, fns []func() (T, error)) ([]T, []error) {
	out := make([]T, len(fns))
	errs := make([]error, len(fns))
	var g errgroup.Group
	g.SetLimit(max(limit, 1))
	for i, f := range fns {
		g.Go(func() error {
			out[i], errs[i] = f()
			return nil
		})
	}
	_ = g.Wait()
	return out, errs
}
