// Package kind is a source of one kind's events from the manager's cache,
// for controllers that must start as soon as their caches allow.
//
// controller-runtime's own (source.Kind) creates its informer when the
// controller starts, after the manager has waited for the caches it
// knew of, and then waits for the new informer and for its handler, each
// polled every 100 ms: a controller's workers started 200 ms after the
// caches had synced (docs/performance.md). Source creates its informer
// when the controller is built, so the manager's cache starts and waits
// for it with the others, and polls the informer and the handler every
// few milliseconds.
package kind
