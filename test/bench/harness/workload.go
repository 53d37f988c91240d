package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/testbed"
)

const (
	// namespace holds every object of the benchmark, in every cluster.
	namespace = "bench"
	// managedBy marks the EndpointSlices the harness writes for its
	// selectorless Services, standing in for the EndpointSlice controller.
	managedBy = "bench.mcsd.io"
	// targetPort is the endpoints' port; the Services serve port 80.
	targetPort = 8080
)

// workload is the benchmark's Services. Each lives in one cluster (its
// source), round-robin, with no selector: the harness writes its
// EndpointSlice, so endpoint changes are one API write and involve neither
// pods nor kube-controller-manager.
type workload struct {
	clusters  []*testbed.Cluster
	clients   map[string]client.Client
	endpoints int
	workers   int

	mu    sync.Mutex
	ready map[string][]bool // service -> endpoint readiness
}

func restConfig(c *testbed.Cluster, qps float32) *rest.Config {
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = qps, int(2*qps)
	return cfg
}

func newWorkload(clusters []*testbed.Cluster, endpoints, workers int, qps float32) (*workload, error) {
	w := &workload{clusters: clusters, clients: map[string]client.Client{}, endpoints: endpoints, workers: workers, ready: map[string][]bool{}}
	for _, c := range clusters {
		cl, err := client.New(restConfig(c, qps), client.Options{Scheme: testbed.Scheme})
		if err != nil {
			return nil, err
		}
		w.clients[c.ID] = cl
	}
	return w, nil
}

// serviceName is the name of Service i.
func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// source is the cluster that Service i lives in.
func (w *workload) source(i int) *testbed.Cluster { return w.clusters[i%len(w.clusters)] }

// maxServices is how many Services the pod ranges fit: each cluster's
// endpoints take addresses of its /16 after the first /24.
func maxServices(clusters, endpoints int) int { return (65536 - 512) / endpoints * clusters }

// address is the address of endpoint j of Service i, in its source's pod range.
func (w *workload) address(i, j int) string {
	c := w.source(i)
	n := (i/len(w.clusters))*w.endpoints + j + 256
	return fmt.Sprintf("10.%d.%d.%d", c.Index, n>>8, n&0xff)
}

// createNamespaces creates the benchmark's namespace in every cluster.
func (w *workload) createNamespaces(ctx context.Context) error {
	for _, c := range w.clusters {
		err := w.clients[c.ID].Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace in %s: %w", c.ID, err)
		}
	}
	return nil
}

// createServices creates Services [from, to) and their EndpointSlices,
// every endpoint ready.
func (w *workload) createServices(ctx context.Context, from, to int) error {
	return w.parallel(ctx, from, to, func(ctx context.Context, i int) error {
		name := serviceName(i)
		cl := w.clients[w.source(i).ID]
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
				Name: "http", Port: 80, TargetPort: intstr.FromInt32(targetPort), Protocol: corev1.ProtocolTCP,
			}}},
		}
		if err := cl.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Service %s: %w", name, err)
		}
		ready := make([]bool, w.endpoints)
		eps := make([]discoveryv1.Endpoint, w.endpoints)
		for j := range eps {
			ready[j] = true
			eps[j] = discoveryv1.Endpoint{
				Addresses:  []string{w.address(i, j)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			}
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-bench", Namespace: namespace, Labels: map[string]string{
				discoveryv1.LabelServiceName: name,
				discoveryv1.LabelManagedBy:   managedBy,
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](targetPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
			Endpoints:   eps,
		}
		if err := cl.Create(ctx, slice); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create EndpointSlice %s: %w", name, err)
		}
		w.mu.Lock()
		w.ready[name] = ready
		w.mu.Unlock()
		return nil
	})
}

// export creates the ServiceExport of Service i.
func (w *workload) export(ctx context.Context, i int) error {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: serviceName(i), Namespace: namespace}}
	if err := w.clients[w.source(i).ID].Create(ctx, se); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("export %s: %w", se.Name, err)
	}
	return nil
}

// unexport deletes the ServiceExport of Service i.
func (w *workload) unexport(ctx context.Context, i int) error {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: serviceName(i), Namespace: namespace}}
	if err := w.clients[w.source(i).ID].Delete(ctx, se); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("unexport %s: %w", se.Name, err)
	}
	return nil
}

// exportAll exports Services [from, to), several at once.
func (w *workload) exportAll(ctx context.Context, idx []int) error {
	return w.parallelOver(ctx, idx, w.export)
}

// unexportAll unexports the given Services, several at once.
func (w *workload) unexportAll(ctx context.Context, idx []int) error {
	return w.parallelOver(ctx, idx, w.unexport)
}

// readyCount returns how many endpoints of svc are ready.
func (w *workload) readyCount(svc string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.ready[svc] {
		if r {
			n++
		}
	}
	return n
}

// toggle flips the readiness of endpoint j of Service i with one patch of
// its EndpointSlice, and returns the ready count it leads to.
func (w *workload) toggle(ctx context.Context, i, j int) (int, error) {
	name := serviceName(i)
	w.mu.Lock()
	now := !w.ready[name][j]
	w.mu.Unlock()
	patch := fmt.Sprintf(`[{"op":"replace","path":"/endpoints/%d/conditions/ready","value":%t},{"op":"replace","path":"/endpoints/%d/conditions/serving","value":%t}]`, j, now, j, now)
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-bench", Namespace: namespace}}
	if err := w.clients[w.source(i).ID].Patch(ctx, slice, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		return 0, fmt.Errorf("patch EndpointSlice %s: %w", slice.Name, err)
	}
	w.mu.Lock()
	w.ready[name][j] = now
	w.mu.Unlock()
	return w.readyCount(name), nil
}

// setReadyCount records readiness as toggle would, before the patch, so
// that the expectation can be set first; it returns the ready count after
// flipping endpoint j.
func (w *workload) readyAfterToggle(svc string, j int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k, r := range w.ready[svc] {
		if k == j {
			r = !r
		}
		if r {
			n++
		}
	}
	return n
}

func (w *workload) parallel(ctx context.Context, from, to int, do func(context.Context, int) error) error {
	idx := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		idx = append(idx, i)
	}
	return w.parallelOver(ctx, idx, do)
}

// parallelOver calls do for every index, w.workers at a time, and stops at
// the first error.
func (w *workload) parallelOver(ctx context.Context, idx []int, do func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, w.workers)
	var wg sync.WaitGroup
	for range w.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(ctx, i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, i := range idx {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return err
}
