package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/bench/report"
)

// FloorNamespace holds the floor phase's objects, which no ServiceExport
// names.
const FloorNamespace = "bench-floor"

// floorWrites names the writes the floor phase makes for one import, in
// the resource/subresource form of the controllers' counters.
var floorWrites = []string{"services", "serviceimports", "endpointslices", "services", "serviceimports/status"}

// floorPhase measures what the testbed itself costs: with every controller
// stopped, the harness makes, in every cluster and for as many Services as
// the cold start imports, exactly the API writes one new import needs, in
// the import controller's order (the derived Service; the ServiceImport with
// the Service's cluster IP and the EndpointSlice, owned by the Service, at
// once; the Service again with the ServiceImport as its owner and the
// ServiceImport's status, at once), w.workers imports at a time per cluster. No controller could
// converge a cold start faster than this on the same machine: it is the
// testbed's floor, set by its API servers, their etcds and
// kube-controller-manager.
func (r *run) floorPhase(ctx context.Context) error {
	r.stopControllers()
	for _, c := range r.clusters {
		err := r.wl.clients[c.ID].Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: FloorNamespace}})
		if client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("create namespace %s in %s: %w", FloorNamespace, c.ID, err)
		}
	}
	n := r.opts.Services
	// First, on as many Services as the export phase had.
	one, oneErr := r.floorOneAtATime(ctx, n)
	if oneErr != nil {
		return oneErr
	}
	var start time.Time
	var mu sync.Mutex
	var done []float64
	writes := map[string]*atomic.Int64{}
	for _, c := range r.clusters {
		writes[c.ID] = &atomic.Int64{}
	}
	ph, err := r.measure(ctx, PhaseFloor, fmt.Sprintf("no controller: the harness makes the %d API writes of each of %d new imports in every cluster, %d at a time", len(floorWrites), n, r.opts.Workers),
		func(*report.Phase) error {
			start = time.Now()
			var wg sync.WaitGroup
			errs := make([]error, len(r.clusters))
			for ci, c := range r.clusters {
				wg.Go(func() {
					cl := r.wl.clients[c.ID]
					errs[ci] = r.wl.parallel(ctx, 0, n, func(ctx context.Context, i int) error {
						if err := FloorImport(ctx, cl, []string{c.ID}, i, r.opts.Endpoints, nil); err != nil {
							return err
						}
						writes[c.ID].Add(int64(len(floorWrites)))
						mu.Lock()
						done = append(done, time.Since(start).Seconds())
						mu.Unlock()
						return nil
					})
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		})
	ph.Changes = n
	ph.Latency = map[string]report.Dist{"import (all clusters)": report.Summarize(done)}
	for _, d := range done {
		ph.Converged = max(ph.Converged, d)
	}
	for id, w := range writes {
		byRes := map[string]int{}
		per := w.Load() / int64(len(floorWrites))
		for _, res := range floorWrites {
			byRes[res] += int(per)
		}
		ph.APIWrites[id] = byRes
	}
	ph.Latency[FloorOneAtATime] = report.Summarize(one)
	return err
}

// FloorOneAtATime names the floor phase's latency floor (see
// run.floorOneAtATime).
const FloorOneAtATime = "import, one at a time, in every cluster at once (2 writes in a row)"

// floorOneAtATime is the latency floor of an export: ExportSamples more
// imports, one at a time at ExportRate (as the export phase exports), each
// written in every cluster at once, as every cluster imports a new export.
// A sample is the time one cluster takes for the writes an import waits
// for, the derived Service then the ServiceImport and EndpointSlice at once,
// as the harness's client sees them answered. It runs before the
// throughput floor, on as many Services as the export phase had; its first
// import is named after the throughput floor's last, first.
func (r *run) floorOneAtATime(ctx context.Context, first int) ([]float64, error) {
	var mu sync.Mutex
	var out []float64
	idx := make([]int, r.opts.ExportSamples)
	for k := range idx {
		idx[k] = first + k
	}
	err := r.paced(ctx, idx, r.opts.ExportRate, func(i int) error {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(r.clusters))
		for ci, c := range r.clusters {
			wg.Go(func() {
				errs[ci] = FloorImport(ctx, r.wl.clients[c.ID], []string{c.ID}, i, r.opts.Endpoints, func() {
					mu.Lock()
					out = append(out, time.Since(start).Seconds())
					mu.Unlock()
				})
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	return out, err
}

// FloorImport makes, in the cluster of cl, the writes of one new import
// number i of the clusters sources (an EndpointSlice for each), in the
// import controller's order, and calls whole, when not nil, once the import
// is whole: its ServiceImport, with the Service's IP, and its EndpointSlices
// written. Its objects are in FloorNamespace, which must exist. They are
// the size of the controller's: as many labels and annotations (mcsd's own
// under the benchmark's keys, which no controller acts on; the slices'
// Kubernetes labels as the controller sets them, read by mcsd's export
// controller, stopped while a floor writes), each endpoint's zone, the
// status's conditions; the API server's work for a write grows with the
// object.
func FloorImport(ctx context.Context, cl client.Client, sources []string, i, endpoints int, whole func()) error {
	name := fmt.Sprintf("floor-%05d", i)
	svc := FloorService(name)
	if err := cl.Create(ctx, svc); err != nil {
		return fmt.Errorf("create Service %s: %w", name, err)
	}
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: FloorNamespace, Annotations: map[string]string{
			floorKey("managed"): "true", floorKey("derived-service"): svc.Name,
		}},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:                  mcsv1beta1.ClusterSetIP,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPs:                   svc.Spec.ClusterIPs,
			Ports:                 []mcsv1beta1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			SessionAffinity:       corev1.ServiceAffinityNone,
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
		},
	}
	eps := FloorEndpoints(endpoints, func(j int) string { return fmt.Sprintf("10.250.%d.%d", i%250, j+1) })
	writes := []func() error{func() error { return wrap("create ServiceImport "+name, cl.Create(ctx, si)) }}
	for _, cluster := range sources {
		slice := FloorSlice(svc, cluster, eps)
		writes = append(writes, func() error { return wrap("create EndpointSlice "+slice.Name, cl.Create(ctx, slice)) })
	}
	if err := all(writes...); err != nil {
		return err
	}
	if whole != nil {
		whole()
	}
	svc.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: mcsv1beta1.GroupVersion.String(), Kind: "ServiceImport", Name: name, UID: si.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	base := si.DeepCopy()
	for _, cluster := range sources {
		si.Status.Clusters = append(si.Status.Clusters, mcsv1beta1.ClusterStatus{Cluster: cluster})
	}
	now := metav1.Now()
	si.Status.Conditions = []metav1.Condition{{
		Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: now, ObservedGeneration: si.Generation,
		Message: fmt.Sprintf("Cluster IP %s from the derived Service %s", strings.Join(svc.Spec.ClusterIPs, ", "), svc.Name),
	}, {
		Type: "EndpointsReady", Status: metav1.ConditionTrue, Reason: "AllClustersReady", LastTransitionTime: now, ObservedGeneration: si.Generation,
		Message: "Every exporting cluster has a ready endpoint",
	}}
	si.Status.EndpointSliceObjects = mcsv1beta1.EndpointSliceObjectsPresent
	return all(
		func() error { return wrap("update Service "+name, cl.Update(ctx, svc)) },
		func() error {
			return wrap("patch ServiceImport "+name+" status", cl.Status().Patch(ctx, si, client.MergeFrom(base)))
		},
	)
}

// FloorService is the derived Service of the floor's import name, in
// FloorNamespace, as the import controller writes one (before its owner).
func FloorService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: FloorNamespace, Annotations: map[string]string{
			floorKey("managed"): "true", floorKey("service-import"): name, floorKey("ip-families"): "",
		}},
		Spec: corev1.ServiceSpec{
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(targetPort), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// FloorEndpoints are n ready endpoints, endpoint j at address addr(j), each
// with a zone, as the import controller writes a source cluster's.
func FloorEndpoints(n int, addr func(j int) string) []discoveryv1.Endpoint {
	eps := make([]discoveryv1.Endpoint, n)
	for j := range eps {
		eps[j] = discoveryv1.Endpoint{
			Addresses:  []string{addr(j)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			Zone:       ptr.To(fmt.Sprintf("zone-%d", j%3)),
		}
	}
	return eps
}

// FloorSlice is the EndpointSlice of cluster's endpoints eps for svc (made
// by FloorService, and created: the slice is owned by it), as the import
// controller writes one: as many labels and annotations, the same port.
func FloorSlice(svc *corev1.Service, cluster string, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-" + cluster, Namespace: FloorNamespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))},
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: managedBy,
				mcsv1beta1.LabelSourceCluster: cluster, floorKey("service-name"): svc.Name},
			Annotations: map[string]string{floorKey("managed"): "true", floorKey("slice-inputs"): "0000000000000.1"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](targetPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

// floorKey is the key of the floor's stand-in for a label or annotation of
// mcsd's named name: as long, under the benchmark's own prefix.
func floorKey(name string) string { return "multicluster.bench.io/" + name }

// all runs fs at the same time and returns their errors.
func all(fs ...func() error) error {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Go(func() { errs[i] = f() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// wrap wraps a non-nil err with what failed.
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
