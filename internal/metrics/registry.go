package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Operation label values.
const (
	opPutExport    = "PutExport"
	opPutEndpoints = "PutEndpoints"
	opPublish      = "Publish"
	opDeleteExport = "DeleteExport"
	opExported     = "Exported"
	opWatchUpdate  = "WatchUpdate"
	opWatchResync  = "WatchResync"
	opWatch        = "Watch"
)

// InstrumentRegistry returns reg with its operations counted and timed in
// the registry metrics of cluster, labelled with reg.Backend():
// every Publisher call, and every update the Watch delivers. The handler a
// Watch is given sees the same calls; its OnConnection reports also set
// mcsd_registry_connected.
func InstrumentRegistry(reg registry.Registry, cluster string) registry.Registry {
	Register()
	return instrumentRegistry(std, reg, cluster)
}

func instrumentRegistry(c *collectors, reg registry.Registry, cluster string) *instrumented {
	backend := reg.Backend()
	r := &instrumented{reg: reg, m: c, cluster: cluster, backend: backend}
	// The series exist from the start, at zero.
	for _, op := range []string{opPutExport, opPutEndpoints, opPublish, opDeleteExport, opExported} {
		c.registryOps.WithLabelValues(cluster, backend, op).Add(0)
		c.registryErrors.WithLabelValues(cluster, backend, op).Add(0)
	}
	c.registryOps.WithLabelValues(cluster, backend, opWatchUpdate).Add(0)
	c.registryOps.WithLabelValues(cluster, backend, opWatchResync).Add(0)
	c.registryErrors.WithLabelValues(cluster, backend, opWatch).Add(0)
	c.registryConnected.WithLabelValues(cluster, backend).Set(0)
	return r
}

type instrumented struct {
	reg              registry.Registry
	m                *collectors
	cluster, backend string
}

var _ registry.Registry = (*instrumented)(nil)

// observe runs one Publisher operation and records it. An error of a call
// whose context ended is not counted: it is the controller stopping.
func (r *instrumented) observe(ctx context.Context, op string, call func() error) error {
	start := time.Now()
	err := call()
	r.m.registryDuration.WithLabelValues(r.cluster, r.backend, op).Observe(time.Since(start).Seconds())
	r.m.registryOps.WithLabelValues(r.cluster, r.backend, op).Inc()
	if err != nil && ctx.Err() == nil {
		r.m.registryErrors.WithLabelValues(r.cluster, r.backend, op).Inc()
	}
	return err
}

func (r *instrumented) PutExport(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec) error {
	return r.observe(ctx, opPutExport, func() error { return r.reg.PutExport(ctx, key, spec) })
}

func (r *instrumented) PutEndpoints(ctx context.Context, key registry.ServiceKey, groups []registry.EndpointGroup) error {
	return r.observe(ctx, opPutEndpoints, func() error { return r.reg.PutEndpoints(ctx, key, groups) })
}

func (r *instrumented) Publish(ctx context.Context, key registry.ServiceKey, spec registry.ServiceSpec, groups []registry.EndpointGroup) error {
	return r.observe(ctx, opPublish, func() error { return r.reg.Publish(ctx, key, spec, groups) })
}

func (r *instrumented) DeleteExport(ctx context.Context, key registry.ServiceKey) error {
	return r.observe(ctx, opDeleteExport, func() error { return r.reg.DeleteExport(ctx, key) })
}

func (r *instrumented) Exported(ctx context.Context) ([]registry.ServiceKey, error) {
	var keys []registry.ServiceKey
	err := r.observe(ctx, opExported, func() error {
		var err error
		keys, err = r.reg.Exported(ctx)
		return err
	})
	return keys, err
}

// Watch watches reg, recording what it delivers to h. When the watch ends,
// the registry counts as not connected. A registry.Scoped h stays one.
func (r *instrumented) Watch(ctx context.Context, h registry.Handler) error {
	var wh registry.Handler = &instrumentedHandler{h: h, r: r}
	if s, ok := h.(registry.Scoped); ok {
		wh = scopedHandler{wh, s}
	}
	err := r.reg.Watch(ctx, wh)
	r.m.registryConnected.WithLabelValues(r.cluster, r.backend).Set(0)
	if err != nil && (!errors.Is(err, context.Canceled) || ctx.Err() == nil) {
		r.m.registryErrors.WithLabelValues(r.cluster, r.backend, opWatch).Inc()
	}
	return err
}

func (r *instrumented) Close() error { return r.reg.Close() }

func (r *instrumented) Backend() string { return r.backend }

// instrumentedHandler passes a Watch's calls on to h, recording them. Calls
// are never concurrent (registry.Handler).
type instrumentedHandler struct {
	h registry.Handler
	r *instrumented
	// down is whether the last report was a loss of the registry.
	down bool
}

// scopedHandler is an instrumentedHandler of a registry.Scoped handler.
type scopedHandler struct {
	registry.Handler
	s registry.Scoped
}

func (sh scopedHandler) Namespaces() map[string]bool     { return sh.s.Namespaces() }
func (sh scopedHandler) NamespacesGrew() <-chan struct{} { return sh.s.NamespacesGrew() }

func (ih *instrumentedHandler) OnUpdate(u registry.Update) {
	op := opWatchUpdate
	if u.Full {
		op = opWatchResync
	}
	start := time.Now()
	ih.h.OnUpdate(u)
	m, cluster, backend := ih.r.m, ih.r.cluster, ih.r.backend
	m.registryDuration.WithLabelValues(cluster, backend, op).Observe(time.Since(start).Seconds())
	m.registryOps.WithLabelValues(cluster, backend, op).Inc()
}

func (ih *instrumentedHandler) OnConnection(connected bool, err error) {
	ih.h.OnConnection(connected, err)
	m, cluster, backend := ih.r.m, ih.r.cluster, ih.r.backend
	// One error per loss, however often the backend reports it.
	down := !connected && err != nil
	if down && !ih.down {
		m.registryErrors.WithLabelValues(cluster, backend, opWatch).Inc()
	}
	ih.down = down
	v := 0.0
	if connected {
		v = 1
	}
	m.registryConnected.WithLabelValues(cluster, backend).Set(v)
}
