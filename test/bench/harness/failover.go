package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/internal/topology"
	"github.com/mcsd-io/mcsd/test/bench/report"
	"github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// The failover phase's figures, keys of its Latency.
const (
	FailoverAway  = "failover: local endpoint not ready → first request served by another cluster"
	FailoverBack  = "failback: local endpoint ready → first request served by it again"
	FailoverFloor = "floor: kube-proxy alone, EndpointSlice written → first request served by the new endpoint"
	// FailoverFloorAfter is the same, the slice written 20 ms after another
	// Service's slice in the cluster changed, as a local endpoint's
	// readiness changes the exported Service's own slice just before mcsd
	// writes the imported one: kube-proxy syncs its rules at most once per
	// --min-sync-period (1 s by default).
	FailoverFloorAfter = "floor: kube-proxy alone, EndpointSlice written 20 ms after another local one → first request served by the new endpoint"
)

// The failover phase's stages, keys of its Stages: from the readiness
// change to each step on the way.
const (
	StageSourceSlice   = "1 c2's own EndpointSlice shows it (Kubernetes' EndpointSlice controller)"
	StageImportedSlice = "2 c2's imported EndpointSlice shows it (mcsd: export, then import; a cluster's own endpoints skip the registry)"
)

// Failover probing: the client pod sends one request every probeGap, at
// most probeCount of them, so a trial is bounded in count and time.
const (
	failoverNS    = "failover"
	probeGap      = 10 * time.Millisecond
	probeCount    = 600
	probeSettle   = time.Second     // requests before the change
	probeSwitched = 3 * time.Second // between the change and the change back
)

// failoverPhase measures, on a clusterset of its own (two clusters with a
// data plane, zones shared), how long kube-proxy in c2 takes to send a
// client's requests elsewhere when c2's own endpoint of a Service that
// prefers the local cluster (topology.PreferSameCluster) turns not ready,
// and back when it is ready again: the pod's readiness change goes through
// Kubernetes' EndpointSlice controller, mcsd's export, the registry, mcsd's
// import in c2 and kube-proxy. The floor, in the same run, is kube-proxy's
// own reaction to an EndpointSlice of a local Service written directly.
// Requests go from a client pod at a steady bounded rate; the pod and the
// harness share the host's clock.
func (r *run) failoverPhase(ctx context.Context) error {
	ph := &report.Phase{Name: PhaseFailover, Latency: map[string]report.Dist{}, Controllers: map[string]report.Proc{}}
	ph.Describe = fmt.Sprintf("a clusterset of its own (2 clusters, data plane): c2's endpoint of a same-cluster-preferring Service "+
		"made not ready and ready again %d times while a client pod in c2 sends a request every %s", r.opts.FailoverTrials, probeGap)
	r.logf("phase %s: %s", PhaseFailover, ph.Describe)
	started := time.Now()
	defer func() {
		ph.Seconds = time.Since(started).Seconds()
		r.res.Phases = append(r.res.Phases, ph)
	}()
	env, err := framework.Start(ctx, framework.Options{Name: "bench-failover", Clusters: 2, SharedZones: true, TTL: r.opts.TTL})
	if err != nil {
		return fmt.Errorf("start the failover clusterset: %w", err)
	}
	defer func() { _ = env.Close(context.WithoutCancel(ctx)) }()
	if err := env.StartControllers(ctx); err != nil {
		return err
	}
	f := &failover{r: r, env: env, c1: env.TB.Cluster("c1"), c2: env.TB.Cluster("c2")}
	if err := f.setUp(ctx); err != nil {
		return err
	}
	watched, err := f.watchSlices(ctx)
	if err != nil {
		return err
	}
	var away, back, floor, floorAfter, source, imported []float64
	failed := 0
	for i := range r.opts.FailoverTrials {
		a, b, n, changes, err := f.trial(ctx)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i+1, err)
		}
		away, back, failed = append(away, a), append(back, b), failed+n
		for _, c := range changes {
			if d, ok := watched.first(c.at, sourceSlice, c.ready); ok {
				source = append(source, d)
			}
			if d, ok := watched.first(c.at, importedSlice, c.ready); ok {
				imported = append(imported, d)
			}
		}
		fa, fb, err := f.floorTrial(ctx, false)
		if err != nil {
			return fmt.Errorf("floor trial %d: %w", i+1, err)
		}
		floor = append(floor, fa, fb)
		fa, fb, err = f.floorTrial(ctx, true)
		if err != nil {
			return fmt.Errorf("floor trial %d after another change: %w", i+1, err)
		}
		floorAfter = append(floorAfter, fa, fb)
	}
	ph.Latency[FailoverAway] = report.Summarize(away)
	ph.Latency[FailoverBack] = report.Summarize(back)
	ph.Latency[FailoverFloor] = report.Summarize(floor)
	ph.Latency[FailoverFloorAfter] = report.Summarize(floorAfter)
	ph.Stages = map[string]report.Dist{StageSourceSlice: report.Summarize(source), StageImportedSlice: report.Summarize(imported)}
	ph.Describe += fmt.Sprintf("; %d requests failed over all %d switches", failed, 2*r.opts.FailoverTrials)
	return nil
}

type failover struct {
	r                 *run
	env               *framework.Env
	c1, c2            *testbed.Cluster
	cl1, cl2          client.Client
	pod1, pod2        string // the web pods' names
	ip2, ip1          string // and IPv4 addresses
	importIP, floorIP string
}

// setUp deploys web (one agnhost pod) in both clusters, exports it with
// the same-cluster preference, starts the client pod in c2 and the floor's
// selector-less Service there, and waits until the client is served by c2.
func (f *failover) setUp(ctx context.Context) error {
	var err error
	if f.cl1, err = client.New(f.c1.Config, client.Options{Scheme: manager.Scheme}); err != nil {
		return err
	}
	if f.cl2, err = client.New(f.c2.Config, client.Options{Scheme: manager.Scheme}); err != nil {
		return err
	}
	labels := map[string]string{"app": "web"}
	for _, cl := range []client.Client{f.cl1, f.cl2} {
		objs := []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: failoverNS}},
			&appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: "web"},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
						Containers: []corev1.Container{framework.Agnhost()},
					}}},
			},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: "web"}, Spec: corev1.ServiceSpec{Selector: labels,
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
			&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: "web"},
				Spec: mcsv1beta1.ServiceExportSpec{ExportedAnnotations: map[string]string{topology.AnnotationPreference: topology.PreferSameCluster}}},
		}
		for _, o := range objs {
			if err := cl.Create(ctx, o); err != nil {
				return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
			}
		}
	}
	clientPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: "client"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "client", Image: "registry.k8s.io/pause:3.10"}}}}
	// The floor's Services have no selector: the harness writes their slices.
	selectorless := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	}
	floor := selectorless("floor")
	for _, o := range []client.Object{clientPod, floor, selectorless("other")} {
		if err := f.cl2.Create(ctx, o); err != nil {
			return fmt.Errorf("create %s: %w", o.GetName(), err)
		}
	}
	f.floorIP = floor.Spec.ClusterIP
	if f.pod1, f.ip1, err = readyPod(ctx, f.cl1, "app", "web"); err != nil {
		return err
	}
	if f.pod2, f.ip2, err = readyPod(ctx, f.cl2, "app", "web"); err != nil {
		return err
	}
	if _, _, err = readyPod(ctx, f.cl2, "", "client"); err != nil {
		return err
	}
	if err := f.writeSlice(ctx, "floor", f.ip2); err != nil {
		return err
	}
	if err := until(ctx, time.Minute, "c2's import of web hinted", func() (bool, error) {
		si := &mcsv1beta1.ServiceImport{}
		if err := f.cl2.Get(ctx, client.ObjectKey{Namespace: failoverNS, Name: "web"}, si); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, c := range si.Status.Conditions {
			if c.Type == topology.ConditionHints && c.Status == metav1.ConditionTrue && len(si.Spec.IPs) > 0 && len(si.Status.Clusters) == 2 {
				f.importIP = si.Spec.IPs[0]
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	// Served by c2 only, on both addresses.
	for _, target := range []struct{ what, ip, svc string }{
		{"the import", f.importIP, imports.DerivedServiceName("web")},
		{"the floor's Service", f.floorIP, "floor"},
	} {
		var last map[string]int // the last probe's replies by pod ("" for none)
		if err := until(ctx, time.Minute, "requests to "+target.what+" ("+target.ip+") served by c2", func() (bool, error) {
			got, err := f.probe(ctx, target.ip, 20, nil)
			if err != nil {
				return false, err
			}
			last = map[string]int{}
			for _, p := range got {
				last[p.from]++
			}
			return slices.IndexFunc(got, func(p probe) bool { return p.from != f.pod2 }) < 0, nil
		}); err != nil {
			return fmt.Errorf("%w; the last requests were answered by %v (c2's pod is %s)\n%s",
				err, last, f.pod2, f.c2.ProxyReport(context.WithoutCancel(ctx), failoverNS, target.svc))
		}
	}
	return nil
}

// readyPod waits for the ready pod of the namespace labelled app=name (or
// named name, when label is "") and returns its name and IPv4 address.
func readyPod(ctx context.Context, cl client.Client, label, name string) (string, string, error) {
	var pod, ip string
	err := until(ctx, time.Minute, "pod "+name+" ready", func() (bool, error) {
		var pods corev1.PodList
		opts := []client.ListOption{client.InNamespace(failoverNS)}
		if label != "" {
			opts = append(opts, client.MatchingLabels{label: name})
		}
		if err := cl.List(ctx, &pods, opts...); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if label == "" && p.Name != name {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
					pod, ip = p.Name, p.Status.PodIP
					return true, nil
				}
			}
		}
		return false, nil
	})
	return pod, ip, err
}

// writeSlice makes the EndpointSlice of the Service named service hold ip.
func (f *failover) writeSlice(ctx context.Context, service, ip string) error {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: failoverNS, Name: service,
		Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "bench.mcsd.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	err := f.cl2.Create(ctx, s)
	if apierrors.IsAlreadyExists(err) {
		old := &discoveryv1.EndpointSlice{}
		if err := f.cl2.Get(ctx, client.ObjectKeyFromObject(s), old); err != nil {
			return err
		}
		old.Endpoints = s.Endpoints
		err = f.cl2.Update(ctx, old)
	}
	if err != nil {
		return fmt.Errorf("write the EndpointSlice of %s: %w", service, err)
	}
	return nil
}

// probe is one request of the client pod: when it was sent and which pod
// answered ("" for none).
type probe struct {
	at   time.Time
	from string
}

// probe sends n requests to ip from the client pod, one every probeGap,
// and returns them. While they run, during (if set) is called with the
// time the first request was sent.
func (f *failover) probe(ctx context.Context, ip string, n int, during func(start time.Time) error) ([]probe, error) {
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do t=$(date +%%s%%N); r=$(curl -s -m 1 http://%s/hostname); echo "$t $r"; i=$((i+1)); sleep %g; done`,
		n, ip, probeGap.Seconds())
	var (
		out    string
		runErr error
		wg     sync.WaitGroup
	)
	start := time.Now()
	wg.Go(func() { out, _, runErr = f.c2.Exec(ctx, failoverNS, "client", "", nil, "sh", "-c", script) })
	var duringErr error
	if during != nil {
		duringErr = during(start)
	}
	wg.Wait()
	if err := errors.Join(runErr, duringErr); err != nil {
		return nil, err
	}
	var got []probe
	for _, l := range strings.Split(out, "\n") {
		ts, from, _ := strings.Cut(strings.TrimSpace(l), " ")
		ns, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			continue
		}
		got = append(got, probe{at: time.Unix(0, ns), from: strings.TrimSpace(from)})
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("no request answered or failed in the client pod's output: %q", out)
	}
	return got, nil
}

// readiness is a readiness change the harness made, and when.
type readiness struct {
	at    time.Time
	ready bool
}

// trial makes c2's web pod not ready, then ready again, while the client
// sends requests to the import, and returns how long the traffic took to
// leave c2 and to come back, how many requests failed, and the two changes.
func (f *failover) trial(ctx context.Context) (away, back float64, failed int, changes []readiness, err error) {
	var down, up time.Time
	got, err := f.probe(ctx, f.importIP, probeCount, func(time.Time) error {
		if err := Sleep(ctx, probeSettle); err != nil {
			return err
		}
		down = time.Now()
		if err := setReady(ctx, f.cl2, f.pod2, false); err != nil {
			return err
		}
		if err := Sleep(ctx, probeSwitched); err != nil {
			return err
		}
		up = time.Now()
		return setReady(ctx, f.cl2, f.pod2, true)
	})
	if err != nil {
		return 0, 0, 0, nil, err
	}
	if away, err = firstFrom(got, down, f.pod1); err != nil {
		return 0, 0, 0, nil, fmt.Errorf("failover: %w", err)
	}
	if back, err = firstFrom(got, up, f.pod2); err != nil {
		return 0, 0, 0, nil, fmt.Errorf("failback: %w", err)
	}
	for _, p := range got {
		if p.from == "" {
			failed++
		}
	}
	return away, back, failed, []readiness{{down, false}, {up, true}}, nil
}

// Kinds of EndpointSlice the failover phase watches in c2.
const (
	sourceSlice   = "source"
	importedSlice = "imported"
)

// sliceLog records, from a watch of c2's EndpointSlices, when c2's web pod
// showed each readiness in its own slice and in mcsd's imported one.
type sliceLog struct {
	mu   sync.Mutex
	seen []sliceSeen
}

type sliceSeen struct {
	at    time.Time
	kind  string
	ready bool
}

// first is the time from since to the first time after it that a slice of
// kind showed the pod with readiness ready, seconds.
func (l *sliceLog) first(since time.Time, kind string, ready bool) (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.seen {
		if s.at.After(since) && s.kind == kind && s.ready == ready {
			return s.at.Sub(since).Seconds(), true
		}
	}
	return 0, false
}

// watchSlices watches c2's EndpointSlices of the phase's namespace until
// ctx ends.
func (f *failover) watchSlices(ctx context.Context) (*sliceLog, error) {
	wc, err := client.NewWithWatch(f.c2.Config, client.Options{Scheme: manager.Scheme})
	if err != nil {
		return nil, err
	}
	w, err := wc.Watch(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(failoverNS))
	if err != nil {
		return nil, fmt.Errorf("watch c2's EndpointSlices: %w", err)
	}
	l := &sliceLog{}
	go func() {
		defer w.Stop()
		defer func() {
			if ctx.Err() == nil {
				f.r.logf("the watch of c2's EndpointSlices ended early: the failover stages count only what it saw")
			}
		}()
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			at := time.Now()
			kind := ""
			switch {
			case s.Labels[discoveryv1.LabelServiceName] == "web" && s.Labels[discoveryv1.LabelManagedBy] == "endpointslice-controller.k8s.io":
				kind = sourceSlice
			case s.Labels[mcsv1beta1.LabelServiceName] == "web" && s.Labels[mcsv1beta1.LabelSourceCluster] == "c2":
				kind = importedSlice
			default:
				continue
			}
			for _, ep := range s.Endpoints {
				if slices.Contains(ep.Addresses, f.ip2) {
					l.mu.Lock()
					l.seen = append(l.seen, sliceSeen{at: at, kind: kind, ready: ptr.Deref(ep.Conditions.Ready, false)})
					l.mu.Unlock()
				}
			}
		}
	}()
	return l, nil
}

// floorTrial moves the floor Service's EndpointSlice from c2's pod to c1's
// and back, while the client sends requests to it; after, each time, 20 ms
// after the slice of another Service (the "other" one) changed.
func (f *failover) floorTrial(ctx context.Context, after bool) (away, back float64, err error) {
	var moved, restored time.Time
	other := func(ip string) error {
		if !after {
			return nil
		}
		if err := f.writeSlice(ctx, "other", ip); err != nil {
			return err
		}
		return Sleep(ctx, 20*time.Millisecond)
	}
	got, err := f.probe(ctx, f.floorIP, probeCount, func(time.Time) error {
		if err := Sleep(ctx, probeSettle); err != nil {
			return err
		}
		if err := other(f.ip1); err != nil {
			return err
		}
		moved = time.Now()
		if err := f.writeSlice(ctx, "floor", f.ip1); err != nil {
			return err
		}
		if err := Sleep(ctx, probeSwitched); err != nil {
			return err
		}
		if err := other(f.ip2); err != nil {
			return err
		}
		restored = time.Now()
		return f.writeSlice(ctx, "floor", f.ip2)
	})
	if err != nil {
		return 0, 0, err
	}
	if away, err = firstFrom(got, moved, f.pod1); err != nil {
		return 0, 0, err
	}
	if back, err = firstFrom(got, restored, f.pod2); err != nil {
		return 0, 0, err
	}
	return away, back, nil
}

// firstFrom is the time from since to the first request sent after it that
// pod answered, seconds.
func firstFrom(got []probe, since time.Time, pod string) (float64, error) {
	for _, p := range got {
		if p.at.After(since) && p.from == pod {
			return p.at.Sub(since).Seconds(), nil
		}
	}
	return 0, fmt.Errorf("no request after %s was answered by %s", since.Format(time.RFC3339Nano), pod)
}

// setReady sets the pod's Ready and ContainersReady conditions, as a kubelet
// whose readiness probe failed or passed again would.
func setReady(ctx context.Context, cl client.Client, name string, ready bool) error {
	pod := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: failoverNS, Name: name}, pod); err != nil {
		return err
	}
	base := pod.DeepCopy()
	framework.SetReadyConditions(pod, ready)
	if err := cl.Status().Patch(ctx, pod, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("set pod %s ready=%v: %w", name, ready, err)
	}
	return nil
}

// Sleep waits d, or until ctx ends: then it returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// until polls cond every 100 ms until it holds, fails, or timeout passes.
func until(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond() }); err != nil {
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	return nil
}
