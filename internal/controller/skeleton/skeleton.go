// Package skeleton is the one shape of every mcsd Reconcile: five steps, in
// the same order, each a function of the controller's own over the state one
// reconcile shares (its scope).
//
//  1. Fetch: read the object the request names, and what the reconcile
//     needs of the cache and the registry, into a new scope.
//  2. Finalize: the finalizer, and what goes with the object's going: an
//     object being deleted (or no longer wanted) is cleaned up here, and the
//     reconcile ends.
//  3. Compute: the desired state, with the controller's pure functions; no
//     writes.
//  4. Apply: the writes that bring the cluster or the registry to it, in the
//     controller's fixed order.
//  5. Patch the status, once, deferred: it runs after Compute and Apply
//     whatever they returned, so that a failure is reported on the object;
//     it decides from the scope whether the steps got far enough to say
//     anything.
//
// Steps run one after the other; a step that writes several objects at once
// for latency does it through package parallel. Package echo follows the
// whole reconcile (echo.Track): its writes hold back the events of the
// objects they write, and one held back that was not their echo brings the
// object back soon. Behind spaces out the looks again of the reconciles
// that keep finding their cache behind the API server.
package skeleton

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mcsd-io/mcsd/internal/controller/echo"
)

// Steps are one controller's five steps over S, its scope (a pointer).
type Steps[S any] struct {
	// LogKey names the object in the reconcile's log lines.
	LogKey string
	// Fetch returns the scope of the request; ok false when there is
	// nothing to reconcile (the object is gone, not mcsd's, or not to be
	// looked at yet), Fetch having done what that asks.
	Fetch func(ctx context.Context, req ctrl.Request) (s S, ok bool, err error)
	// Finalize handles the finalizer; done true ends the reconcile there,
	// with no status written by the skeleton (the object is going; a
	// Finalize whose cleanup fails may say why on the object itself).
	Finalize func(ctx context.Context, s S) (done bool, err error)
	// Compute fills in the scope's desired state.
	Compute func(ctx context.Context, s S) error
	// Apply writes the desired state.
	Apply func(ctx context.Context, s S) error
	// PatchStatus writes the status from what the steps before found, and
	// returns when to look again (0: when an event asks).
	PatchStatus func(ctx context.Context, s S) (requeueAfter time.Duration, err error)
}

// Reconcile runs steps for req, in a reconcile that package echo follows:
// it asks to look again within echo.Recheck when an event of an object it
// wrote was held back and was not that write's echo, or was the echo of a
// write a reconcile awaited (echo.Missed.Requeue).
func Reconcile[S any](ctx context.Context, req ctrl.Request, steps Steps[S]) (ctrl.Result, error) {
	ctx, missed := echo.Track(ctx)
	return missed.Requeue(runSteps(ctx, req, steps))
}

// runSteps runs steps for req, Fetch to Apply and then the status patch.
func runSteps[S any](ctx context.Context, req ctrl.Request, steps Steps[S]) (res ctrl.Result, retErr error) {
	log := ctrl.LoggerFrom(ctx).WithValues(steps.LogKey, klog.KRef(req.Namespace, req.Name))
	ctx = ctrl.LoggerInto(ctx, log)

	s, ok, err := steps.Fetch(ctx, req)
	if !ok || err != nil {
		return ctrl.Result{}, err
	}
	if done, err := steps.Finalize(ctx, s); done || err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		after, err := steps.PatchStatus(ctx, s)
		if retErr = errors.Join(retErr, err); retErr == nil {
			res.RequeueAfter = after
		}
	}()
	if err := steps.Compute(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, steps.Apply(ctx, s)
}
