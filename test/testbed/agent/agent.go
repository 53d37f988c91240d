package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"

	"github.com/mcsd-io/mcsd/test/testbed/images"
	"github.com/mcsd-io/mcsd/test/testbed/netns"
)

// Agent is one cluster's node agent.
type Agent struct {
	cfg   *Config
	progs Programs
	cs    kubernetes.Interface
	log   logr.Logger
	ipam  *ipam
	pods  corelisters.PodLister
	queue workqueue.TypedRateLimitingInterface[string]
	nodes map[string]Node

	unshare string        // util-linux unshare's path
	images  *images.Store // nil: no image store

	mu        sync.Mutex
	sandboxes map[types.UID]*sandbox
	byKey     map[string]types.UID
	children  *children
	// zone sees that kube-proxy has its node's zone.
	zone *zoneKeeper
}

// New returns an agent for cfg; self is this program's path (its pause and
// pod-init commands run in pods).
func New(cfg *Config, self string, log logr.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("the agent needs util-linux's unshare: %w", err)
	}
	var store *images.Store
	if cfg.Images != "" {
		if store, err = images.Open(cfg.Images); err != nil {
			return nil, err
		}
	}
	nodes := map[string]Node{}
	for _, n := range cfg.Nodes {
		nodes[n.Name] = n
	}
	return &Agent{
		cfg:       cfg,
		progs:     Programs{Agnhost: cfg.Agnhost, Self: self},
		cs:        cs,
		log:       log,
		ipam:      newIPAM(),
		nodes:     nodes,
		unshare:   unshare,
		images:    store,
		sandboxes: map[types.UID]*sandbox{},
		byKey:     map[string]types.UID{},
		children:  &children{log: log},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
	}, nil
}

// Run serves until ctx ends: the API relay, the streaming server,
// kube-proxy, DNS, and the pods of the cluster's nodes.
func (a *Agent) Run(ctx context.Context) error {
	defer a.queue.ShutDown()
	defer a.children.stopAll()
	for _, dir := range []string{a.cfg.StateDir, a.cfg.SocketDir, filepath.Join(a.cfg.StateDir, "pods")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	_ = os.Remove(filepath.Join(a.cfg.StateDir, ReadyFile))
	// Pods of an earlier run of the agent lost their processes with it:
	// their namespaces go, and the pods are set up again below.
	RuncCleanup(a.cfg.Runc, a.runcRoot())
	if err := netns.DeleteAll(ctx, a.cfg.PodNetnsPrefix); err != nil {
		return fmt.Errorf("remove pod namespaces of an earlier run: %w", err)
	}
	if err := a.startRelay(ctx); err != nil {
		return err
	}
	if err := a.startExecServer(ctx); err != nil {
		return err
	}
	if err := a.startKubeProxy(ctx); err != nil {
		return err
	}
	if err := a.startDNS(ctx); err != nil {
		return err
	}

	factory := informers.NewSharedInformerFactory(a.cs, 0)
	inf := factory.Core().V1().Pods()
	a.pods = inf.Lister()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.enqueue,
		UpdateFunc: func(_, obj any) { a.enqueue(obj) },
		DeleteFunc: a.enqueue,
	}); err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return errors.New("pod cache did not sync")
	}
	// The API server answers: kube-proxy's starts are followed from here.
	go a.zone.run(ctx, a.nodeZoned)
	// Addresses that pods hold already are not handed out again.
	pods, _ := a.pods.List(everything)
	for _, p := range pods {
		if _, ours := a.nodes[p.Spec.NodeName]; ours && !p.Spec.HostNetwork {
			a.ipam.use(string(p.UID), podIPs(p))
		}
	}
	const workers = 4
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a.processNext(ctx) {
			}
		}()
	}
	if err := a.waitServing(ctx); err != nil {
		a.queue.ShutDown()
		wg.Wait()
		return err
	}
	if err := os.WriteFile(filepath.Join(a.cfg.StateDir, ReadyFile), []byte(time.Now().UTC().Format(time.RFC3339)), 0o644); err != nil {
		return fmt.Errorf("write ready marker: %w", err)
	}
	a.log.Info("agent ready", "cluster", a.cfg.Cluster)
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	return nil
}

func (a *Agent) enqueue(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if _, ours := a.nodes[pod.Spec.NodeName]; !ours {
		return
	}
	a.queue.Add(pod.Namespace + "/" + pod.Name)
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	if err := a.syncPod(ctx, key); err != nil {
		a.log.Error(err, "sync pod", "pod", key)
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// deletePod removes a terminating pod from the API once its processes are
// gone, as a kubelet does.
func (a *Agent) deletePod(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	err := a.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod: %w", err)
	}
	return nil
}
