package status

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/clusterid"
	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Options configure Collect.
type Options struct {
	// ClusterSet is the clusterset to report on. When empty, it is read from
	// the local cluster's ClusterProperty.
	ClusterSet string
	// OpenWatcher opens a read-only watcher of a clusterset.
	OpenWatcher func(ctx context.Context, clusterSet string) (registry.ReadOnlyWatcher, error)
	// Local reads the local cluster; nil for a report of the registry only.
	Local client.Reader
	// LocalOptional turns a local cluster that cannot be read into a
	// warning and a report of the registry only (a kubeconfig found by
	// default rather than named).
	LocalOptional bool
	// Namespace limits the services and local objects; "" for all.
	Namespace string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// LeaseGrace is how long a lease may hold no mcsd record before the
	// report counts it (a registry whose leases any client may grant, see
	// registry.LeaseAuditor): leases found idle are looked at again after
	// it. Default DefaultLeaseGrace.
	LeaseGrace time.Duration
}

// DefaultLeaseGrace is Options.LeaseGrace's default: far longer than mcsd
// takes from granting a lease to writing its alive record on it.
const DefaultLeaseGrace = 2 * time.Second

// optionalLocalTimeout bounds the reads of a local cluster found by default.
const optionalLocalTimeout = 5 * time.Second

// auditTimeout bounds the lease audit of a report, both looks included.
const auditTimeout = 10 * time.Second

// Collect reads the registry and the local cluster and builds their Report.
// ctx bounds the whole: a registry that cannot be read fails it when ctx
// ends.
func Collect(ctx context.Context, opts Options) (Report, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	in := Input{ClusterSet: opts.ClusterSet, Namespace: opts.Namespace}
	// An optional local cluster gets a few seconds of its own for each
	// read: one that does not answer must not take the registry's time.
	localCtx := func() (context.Context, context.CancelFunc) {
		if opts.LocalOptional {
			return context.WithTimeout(ctx, optionalLocalTimeout)
		}
		return ctx, func() {}
	}
	if opts.Local != nil {
		in.Local = &LocalObjects{}
		lctx, cancel := localCtx()
		id, err := clusterid.Read(lctx, opts.Local)
		cancel()
		switch {
		case err == nil:
			in.Local.Cluster = id.Cluster
			if in.ClusterSet == "" {
				in.ClusterSet = id.ClusterSet
			} else if id.ClusterSet != in.ClusterSet {
				in.Warnings = append(in.Warnings, fmt.Sprintf("the local cluster %s is in clusterset %s, not %s", id.Cluster, id.ClusterSet, in.ClusterSet))
			}
		case in.ClusterSet == "":
			return Report{}, fmt.Errorf("no clusterset given and the local cluster's cannot be read: %w", err)
		case opts.LocalOptional && !errors.Is(err, clusterid.ErrMissing) && !errors.Is(err, clusterid.ErrInvalid):
			in.Warnings = append(in.Warnings, fmt.Sprintf("the kubeconfig's cluster cannot be read (%v): the registry alone is shown", err))
			in.Local, opts.Local = nil, nil
		default:
			in.Warnings = append(in.Warnings, fmt.Sprintf("the local cluster's id cannot be read: %v", err))
		}
	}
	if in.ClusterSet == "" {
		return Report{}, errors.New("no clusterset: give one, or a local cluster whose ClusterProperty names it")
	}

	w, err := opts.OpenWatcher(ctx, in.ClusterSet)
	if err != nil {
		return Report{}, fmt.Errorf("open registry: %w", err)
	}
	defer func() { _ = w.Close() }()
	in.Snapshot, err = ReadSnapshot(ctx, w)
	if err != nil {
		return Report{}, err
	}
	in.Time = opts.Now()
	if li, ok := w.(registry.LeaseInspector); ok {
		in.Leases, err = li.Leases(ctx)
		if err != nil {
			in.Warnings = append(in.Warnings, fmt.Sprintf("leases cannot be read: %v", err))
		}
	}
	if opts.Local != nil {
		lctx, cancel := localCtx()
		err := readLocal(lctx, opts.Local, opts.Namespace, in.Local)
		cancel()
		if err != nil {
			if !opts.LocalOptional {
				return Report{}, err
			}
			in.Warnings = append(in.Warnings, fmt.Sprintf("the kubeconfig's cluster cannot be read (%v): the registry alone is shown", err))
			in.Local = nil
		}
	}
	if la, ok := w.(registry.LeaseAuditor); ok {
		// Last, and bounded on its own: a large or shared etcd makes it
		// slow, and it is a part of the report, not a condition of it.
		actx, cancel := context.WithTimeout(ctx, auditTimeout)
		in.LeaseAudit, err = auditLeases(actx, la, opts)
		cancel()
		if err != nil {
			in.Warnings = append(in.Warnings, fmt.Sprintf("the registry's leases cannot be audited: %v", err))
		}
	}
	r := Build(in)
	if csl, ok := w.(registry.ClusterSetLister); ok && len(r.Clusters) == 0 {
		// Asked for a clusterset without clusters: a typo, or another
		// registry? Name those that exist.
		sets, err := csl.ClusterSets(ctx)
		if err != nil {
			r.Warnings = append(r.Warnings, fmt.Sprintf("the registry's other clustersets cannot be listed: %v", err))
		}
		r.ClusterSets = append([]string{}, sets...)
	}
	return r, nil
}

// auditLeases audits the registry's leases; when some hold no mcsd record,
// it audits again after the grace and counts those idle both times.
func auditLeases(ctx context.Context, la registry.LeaseAuditor, opts Options) (*LeaseAudit, error) {
	grace := opts.LeaseGrace
	if grace <= 0 {
		grace = DefaultLeaseGrace
	}
	t := registry.IdleTracker{Grace: grace}
	a, err := la.AuditLeases(ctx)
	if err != nil {
		return nil, err
	}
	t.Observe(opts.Now(), a.Idle)
	if len(a.Idle) > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
		if a, err = la.AuditLeases(ctx); err != nil {
			return nil, err
		}
		// The timer fired, so at least grace has passed by the clock; an
		// injected clock may not have moved, so the second look is dated
		// grace after the first.
		a.Idle = t.Observe(opts.Now().Add(grace), a.Idle)
	}
	return &LeaseAudit{Total: a.Total, Idle: len(a.Idle), Foreign: a.Foreign, Unreadable: a.Unreadable, GraceSeconds: grace.Seconds()}, nil
}

// ReadSnapshot watches w until its first full update and returns it. It
// fails when ctx ends first, with the last reason the registry could not be
// read.
func ReadSnapshot(ctx context.Context, w registry.Watcher) (Snapshot, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := &snapshotHandler{full: make(chan Snapshot, 1), cancel: cancel}
	var err error
	done := make(chan struct{})
	go func() {
		err = w.Watch(ctx, h)
		close(done)
	}()
	select {
	case s := <-h.full:
		cancel()
		<-done
		return s, nil
	case <-done:
	}
	select {
	case s := <-h.full: // the full update came with the end of Watch
		return s, nil
	default:
	}
	switch {
	case errors.Is(h.lastErr, registry.ErrForbidden) || errors.Is(h.lastErr, registry.ErrMisconfigured):
		err = h.lastErr
	case h.lastErr != nil:
		err = fmt.Errorf("%w (last error: %w)", err, h.lastErr)
	}
	return Snapshot{}, fmt.Errorf("read registry: %w", err)
}

// snapshotHandler takes the first full update. Handler calls are never
// concurrent, and lastErr is read only after Watch returned.
type snapshotHandler struct {
	full    chan Snapshot
	cancel  context.CancelFunc
	taken   bool
	lastErr error
}

func (h *snapshotHandler) OnUpdate(u registry.Update) {
	if !u.Full || h.taken {
		return
	}
	h.taken = true
	h.full <- screened(u)
	h.cancel()
}

// screened returns the records of the full update u as every mcsd reads
// them (clusterset.View): without the records readers refuse, and without
// the other records of a refused record's cluster and Service, which are
// listed in Rejected.
func screened(u registry.Update) Snapshot {
	v := clusterset.NewView()
	v.OnUpdate(u)
	keys := map[registry.ServiceKey]bool{}
	for _, x := range u.Exports {
		keys[x.Service] = true
	}
	for _, e := range u.Endpoints {
		keys[e.Service] = true
	}
	for _, r := range u.Rejected {
		keys[r.Record.Service] = true
	}
	s := Snapshot{Clusters: u.Clusters}
	for _, k := range slices.SortedFunc(maps.Keys(keys), registry.ServiceKey.Compare) {
		svc := v.Service(k)
		s.Exports = append(s.Exports, svc.Exports...)
		for _, c := range slices.Sorted(maps.Keys(svc.Endpoints)) {
			s.Endpoints = append(s.Endpoints, svc.Endpoints[c])
		}
		s.Rejected = append(s.Rejected, svc.Rejected...)
	}
	return s
}

func (h *snapshotHandler) OnConnection(connected bool, err error) {
	if !connected {
		h.lastErr = err
		if errors.Is(err, registry.ErrForbidden) || errors.Is(err, registry.ErrMisconfigured) {
			// Retrying cannot fix it: say so now, not when the time is up.
			h.cancel()
		}
	}
}

// readLocal reads the local cluster's ServiceExports, ServiceImports and
// the EndpointSlices mcsd wrote for imports, in namespace or everywhere.
func readLocal(ctx context.Context, c client.Reader, namespace string, out *LocalObjects) error {
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	var ses mcsv1beta1.ServiceExportList
	if err := c.List(ctx, &ses, opts...); err != nil {
		return fmt.Errorf("list ServiceExports: %w", err)
	}
	var sis mcsv1beta1.ServiceImportList
	if err := c.List(ctx, &sis, opts...); err != nil {
		return fmt.Errorf("list ServiceImports: %w", err)
	}
	var eps discoveryv1.EndpointSliceList
	if err := c.List(ctx, &eps, append(opts, client.MatchingLabels{discoveryv1.LabelManagedBy: wellknown.ManagedBy})...); err != nil {
		return fmt.Errorf("list EndpointSlices: %w", err)
	}
	out.Exports, out.Imports, out.Slices = ses.Items, sis.Items, eps.Items
	return nil
}
