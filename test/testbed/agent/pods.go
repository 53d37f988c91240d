package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

var everything = labels.Everything()

// sandbox is a pod as the agent runs it.
type sandbox struct {
	uid       types.UID
	namespace string
	name      string
	node      Node
	netns     string
	link      string
	hostname  string
	ips       []string
	dir       string
	started   time.Time

	mu          sync.Mutex
	execs       sync.WaitGroup // kubectl exec sessions under way
	containers  []*container
	stopping    bool
	readyChange time.Time
	lastReady   bool
	lastWritten string

	volumes  map[string]string // image containers' volumes: directory by name (volumes.go)
	writable map[string]bool   // the emptyDir volumes
}

func podIPs(p *corev1.Pod) []string {
	var ips []string
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []string{p.Status.PodIP}
	}
	return ips
}

// syncPod converges one pod: runs it, reports its status, or stops it.
func (a *Agent) syncPod(ctx context.Context, key string) error {
	ns, name, _ := strings.Cut(key, "/")
	pod, err := a.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		a.stopKey(ctx, key, "")
		return nil
	}
	if err != nil {
		return err
	}
	// A pod of the same name but another uid replaced this one.
	a.stopKey(ctx, key, pod.UID)

	a.mu.Lock()
	sb := a.sandboxes[pod.UID]
	a.mu.Unlock()

	if pod.DeletionTimestamp != nil {
		if sb != nil {
			a.stopSandbox(ctx, sb, gracePeriod(pod))
		}
		return a.deletePod(ctx, pod)
	}
	if sb == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return nil // it ran to its end in an earlier run of the agent
		}
		if pod.Spec.HostNetwork {
			return a.refuse(ctx, pod, "HostNetworkNotSupported",
				"the testbed runs pods in network namespaces of their own; hostNetwork pods are not run")
		}
		if sb, err = a.startSandbox(ctx, pod); err != nil {
			return err
		}
	} else if a.retryContainers(ctx, pod, sb) {
		// A kubelet retries, too: the Secret a volume needs may come later.
		a.queue.AddAfter(key, 2*time.Second)
	}
	return a.writeStatus(ctx, pod, sb)
}

// stopKey stops the sandbox that runs under key with a uid other than keep.
func (a *Agent) stopKey(ctx context.Context, key string, keep types.UID) {
	a.mu.Lock()
	uid, ok := a.byKey[key]
	sb := a.sandboxes[uid]
	a.mu.Unlock()
	if !ok || uid == keep || sb == nil {
		return
	}
	a.stopSandbox(ctx, sb, 0)
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	g := 30 * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		g = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	// The testbed's pods stop quickly; a long grace only slows tests down.
	return min(g, 5*time.Second)
}

// startSandbox creates the pod's namespace and starts its containers.
func (a *Agent) startSandbox(ctx context.Context, pod *corev1.Pod) (*sandbox, error) {
	node := a.nodes[pod.Spec.NodeName]
	uid := string(pod.UID)
	ips := podIPs(pod)
	if !within(ips, node.PodCIDRs) {
		var err error
		if ips, err = a.ipam.allocate(uid, node.PodCIDRs); err != nil {
			return nil, err
		}
	} else {
		a.ipam.use(uid, ips)
	}
	nsName, link := a.sandboxNames(uid)
	hostname := pod.Spec.Hostname
	if hostname == "" {
		hostname = pod.Name
	}
	if len(hostname) > 63 {
		hostname = hostname[:63]
	}
	sb := &sandbox{
		uid: pod.UID, namespace: pod.Namespace, name: pod.Name, node: node,
		netns: nsName, link: link, hostname: hostname, ips: ips,
		dir:     filepath.Join(a.cfg.StateDir, "pods", pod.Namespace+"_"+pod.Name+"_"+uid[:8]),
		started: time.Now(),
	}
	if err := os.MkdirAll(sb.dir, 0o755); err != nil {
		return nil, fmt.Errorf("pod directory: %w", err)
	}
	if err := a.createSandbox(ctx, sb); err != nil {
		_ = a.deleteSandbox(ctx, sb)
		a.ipam.release(uid)
		return nil, err
	}
	view := podView(pod, sb)
	for _, c := range pod.Spec.Containers {
		sb.containers = append(sb.containers, a.newContainer(ctx, view, sb, c))
	}
	a.mu.Lock()
	a.sandboxes[pod.UID] = sb
	a.byKey[pod.Namespace+"/"+pod.Name] = pod.UID
	a.mu.Unlock()
	key := pod.Namespace + "/" + pod.Name
	for _, c := range sb.containers {
		if c.argv != nil {
			a.startContainer(sb, c, key)
		}
	}
	a.log.Info("pod started", "pod", key, "ips", ips, "netns", nsName)
	return sb, nil
}

// podView is the pod as its containers' downward API sees it: with the
// addresses its status will report.
func podView(pod *corev1.Pod, sb *sandbox) *corev1.Pod {
	view := pod.DeepCopy()
	view.Status.PodIP = sb.ips[0]
	view.Status.PodIPs = nil
	for _, ip := range sb.ips {
		view.Status.PodIPs = append(view.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	view.Status.HostIP = sb.node.IPs[0]
	view.Status.HostIPs = nil
	for _, ip := range sb.node.IPs {
		view.Status.HostIPs = append(view.Status.HostIPs, corev1.HostIP{IP: ip})
	}
	return view
}

// retryContainers prepares again the image containers that could not be
// (a ConfigMap or Secret missing, say) and starts those that now can; true
// while one still cannot.
func (a *Agent) retryContainers(ctx context.Context, pod *corev1.Pod, sb *sandbox) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.stopping {
		return false
	}
	pending := false
	for i, c := range sb.containers {
		c.mu.Lock()
		retry := c.retry && c.argv == nil
		c.mu.Unlock()
		if !retry {
			continue
		}
		sb.volumes = nil // written again, with what is there now
		nc := a.newContainer(ctx, podView(pod, sb), sb, pod.Spec.Containers[i])
		if nc.argv == nil {
			pending = true
			c.mu.Lock()
			c.reason, c.message = nc.reason, nc.message
			c.mu.Unlock()
			continue
		}
		sb.containers[i] = nc
		a.startContainer(sb, nc, pod.Namespace+"/"+pod.Name)
	}
	return pending
}

func within(ips, cidrs []string) bool {
	if len(ips) != len(cidrs) || len(ips) == 0 {
		return false
	}
	for i, ip := range ips {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			return false
		}
		p, err := netip.ParsePrefix(cidrs[i])
		if err != nil || !p.Contains(addr) {
			return false
		}
	}
	return true
}

// stopSandbox stops the pod's processes (TERM, then KILL after grace) and
// removes its namespace.
func (a *Agent) stopSandbox(ctx context.Context, sb *sandbox, grace time.Duration) {
	sb.mu.Lock()
	sb.stopping = true
	cs := sb.containers
	sb.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(grace) }()
	}
	wg.Wait()
	// Removing the namespace kills what still runs in it, execs under way
	// included (no new one starts now); then they have ended.
	if err := a.deleteSandbox(ctx, sb); err != nil {
		a.log.Error(err, "remove pod namespace", "pod", sb.namespace+"/"+sb.name)
	}
	sb.execs.Wait()
	a.ipam.release(string(sb.uid))
	a.mu.Lock()
	delete(a.sandboxes, sb.uid)
	if a.byKey[sb.namespace+"/"+sb.name] == sb.uid {
		delete(a.byKey, sb.namespace+"/"+sb.name)
	}
	a.mu.Unlock()
	a.log.Info("pod stopped", "pod", sb.namespace+"/"+sb.name)
}

// sandboxFor returns the running sandbox of a pod, by namespace and name.
func (a *Agent) sandboxFor(namespace, name string) *sandbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sandboxes[a.byKey[namespace+"/"+name]]
}

// refuse reports a pod the agent does not run: Pending, not ready, every
// container waiting with the reason.
func (a *Agent) refuse(ctx context.Context, pod *corev1.Pod, reason, message string) error {
	ready := podCondition(pod, corev1.PodReady)
	if pod.Status.Phase == corev1.PodPending && ready != nil && ready.Reason == reason {
		return nil // said already
	}
	st := map[string]any{"phase": corev1.PodPending}
	var conds []corev1.PodCondition
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodReady && c.Type != corev1.ContainersReady {
			conds = append(conds, c)
		}
	}
	now := metav1.Now()
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		conds = append(conds, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: message, LastTransitionTime: now})
	}
	st["conditions"] = conds
	var cs []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		cs = append(cs, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}})
	}
	st["containerStatuses"] = cs
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID}, "status": st})
	if err != nil {
		return fmt.Errorf("encode pod status: %w", err)
	}
	if _, err := a.cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch pod status: %w", err)
	}
	return nil
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
