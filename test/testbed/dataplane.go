package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/test/testbed/agent"
)

// The data plane: pods that run as processes in network namespaces, kube-proxy
// and DNS in each cluster's node namespace, and routes between the clusters'
// pod ranges (see network.go for the addresses and the agent package for what
// runs). It needs root: network namespaces, links and nftables.

func (tb *Testbed) dataPlane() bool { return !tb.opts.NoDataPlane }

// checkHost makes sure the machine can run the data plane: root, and the
// system tools (installed from Debian's packages when missing).
func checkHost(ctx context.Context, log io.Writer) error {
	if os.Geteuid() != 0 {
		return errors.New("the testbed's data plane needs root: it creates network namespaces, veth links and " +
			"nftables rules (for kube-proxy) for its pods; run as root, or set Options.NoDataPlane for a control plane alone")
	}
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "ensure-host-tools.sh"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("install the data plane's system tools (hack/ensure-host-tools.sh): %w", err)
	}
	return nil
}

// agentBinary is this repository's testbed command, built into the state
// directory: its `agent` command is the node agent. Running it from there
// lets killUnder find it.
func (tb *Testbed) agentBinary() string { return filepath.Join(tb.dir, "bin", "testbed") }

func (tb *Testbed) buildAgent(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tb.agentBinary(), "./test/testbed/cmd/testbed")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the node agent: %w: %s", err, tail(out))
	}
	return nil
}

func (c *Cluster) agentDir() string { return filepath.Join(c.tb.dir, "agent-"+c.ID) }

func (c *Cluster) pkiFile(name string) string { return filepath.Join(c.clusterDir(), "pki", name) }

// agentConfig returns the agent's configuration, written afresh on every
// start (the cluster may have been created again, with another API port and
// CA) but keeping the streaming server's port, which the nodes name; and
// whether it differs from the one the running agent was started with.
func (c *Cluster) agentConfig() (*agent.Config, bool, error) {
	path := filepath.Join(c.agentDir(), "config.json")
	old, _ := agent.Load(path)
	var port int
	if old != nil {
		_, p, _ := strings.Cut(old.ExecAddr, ":")
		port, _ = strconv.Atoi(p)
	}
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return nil, false, err
		}
	}
	host := strings.TrimPrefix(strings.TrimPrefix(c.Config.Host, "https://"), "http://")
	cfg := &agent.Config{
		Cluster:        c.ID,
		Kubeconfig:     c.Kubeconfig,
		APIAddr:        host,
		StateDir:       c.agentDir(),
		SocketDir:      c.socketDir(),
		NodeNetns:      c.NodeNetns(),
		PodNetnsPrefix: c.podNetnsPrefix(),
		ClusterCIDRs:   PodCIDRsFor(c.Index),
		DNSServiceIPs:  DNSServiceIPs(c.Index),
		ExecAddr:       "127.0.0.1:" + strconv.Itoa(port),
		ClientCA:       c.pkiFile("ca.crt"),
		// The cluster's DNS, on node 0's addresses: kube-dns's endpoints.
		Corefile:  corefile("53", NodeIPs(c.Index, 0), "127.0.0.1:8181", c.tb.Kubeconfig, c.ID),
		KubeProxy: c.tb.bin.KubeProxy,
		CoreDNS:   c.tb.bin.CoreDNS,
		Agnhost:   c.tb.bin.Agnhost,
		Images:    c.tb.ImageStore(),
	}
	if runc, err := exec.LookPath("runc"); err == nil {
		cfg.Runc = runc
	}
	for n := 0; n < c.tb.opts.NodesPerCluster; n++ {
		cfg.Nodes = append(cfg.Nodes, agent.Node{Name: c.NodeName(n), PodCIDRs: NodePodCIDRs(c.Index, n), IPs: NodeIPs(c.Index, n)})
	}
	if err := os.MkdirAll(c.agentDir(), 0o755); err != nil {
		return nil, false, fmt.Errorf("create agent directory: %w", err)
	}
	changed := old == nil || !reflect.DeepEqual(old, cfg)
	return cfg, changed, cfg.Write(path)
}

// prepareDataPlane points the nodes at the agent (addresses, kubelet port)
// and creates the kube-dns Service, whose endpoints are the DNS server in
// the node namespace.
func (c *Cluster) prepareDataPlane(ctx context.Context, cfg *agent.Config) error {
	cl, err := c.Client()
	if err != nil {
		return err
	}
	_, port, _ := strings.Cut(cfg.ExecAddr, ":")
	kubeletPort, _ := strconv.Atoi(port)
	for _, n := range cfg.Nodes {
		// The API server dials a node's Hostname address first: the agent's
		// streaming server on the host's loopback.
		patch := map[string]any{"status": map[string]any{
			"addresses": []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: n.IPs[0]},
				{Type: corev1.NodeInternalIP, Address: n.IPs[1]},
				{Type: corev1.NodeHostName, Address: "127.0.0.1"},
			},
			"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]any{"Port": kubeletPort}},
		}}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
		if err := cl.Status().Patch(ctx, node, client.RawPatch(types.MergePatchType, mustJSON(patch))); err != nil {
			return fmt.Errorf("set addresses of node %s: %w", n.Name, err)
		}
	}
	return ensureDNSService(ctx, cl, c.Index, cfg.Nodes[0].IPs)
}

// ensureDNSService creates kube-system/kube-dns with the cluster's DNS
// service IPs and an EndpointSlice per family for the node namespace's DNS.
func ensureDNSService(ctx context.Context, cl client.Client, index int, dnsIPs []string) error {
	ports := []corev1.ServicePort{
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.ServiceSpec{
			ClusterIP:      DNSServiceIPs(index)[0],
			ClusterIPs:     DNSServiceIPs(index),
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			Ports:          ports,
		},
	}
	// Looked up first: creating it again fails on its taken IPs, not its name.
	err := cl.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{})
	if apierrors.IsNotFound(err) {
		err = cl.Create(ctx, svc)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create kube-dns Service: %w", err)
	}
	for i, family := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		eps := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: "kube-dns-testbed-" + strings.ToLower(string(family)), Namespace: "kube-system",
				Labels: map[string]string{
					discoveryv1.LabelServiceName: "kube-dns",
					discoveryv1.LabelManagedBy:   "testbed.mcsd.io",
				},
			},
			AddressType: family,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{dnsIPs[i]}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		}
		for _, p := range ports {
			eps.Ports = append(eps.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(p.Port)})
		}
		if err := cl.Create(ctx, eps); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create kube-dns EndpointSlice: %w", err)
		}
	}
	return nil
}

// agentPid returns the pid in the agent's pid file when that process is
// alive and is this testbed's agent (a pid file can outlive its process,
// and the pid be reused by another program).
func agentPid(agentDir, binary string) int {
	data, err := os.ReadFile(filepath.Join(agentDir, "pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 || !processAlive(pid) {
		return 0
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return 0
	}
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	if argv0 != binary {
		return 0
	}
	if st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat")); err == nil {
		// The state follows the command name in parentheses; Z is a zombie.
		if i := strings.LastIndexByte(string(st), ')'); i > 0 && strings.HasPrefix(strings.TrimSpace(string(st[i+1:])), "Z") {
			return 0
		}
	}
	return pid
}

// startAgent starts the cluster's node agent unless it runs already with
// the same configuration; one with another is stopped first.
func (c *Cluster) startAgent(cfg *agent.Config, changed bool) error {
	if pid := agentPid(c.agentDir(), c.tb.agentBinary()); pid > 0 {
		if !changed {
			return nil
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = os.Remove(filepath.Join(c.agentDir(), agent.ReadyFile))
	logf, err := os.OpenFile(filepath.Join(c.agentDir(), "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("agent log: %w", err)
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(c.tb.agentBinary(), "agent", "-config", filepath.Join(c.agentDir(), "config.json"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C meant for the caller does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the node agent of %s: %w", c.ID, err)
	}
	go func() { _ = cmd.Wait() }()
	return os.WriteFile(filepath.Join(c.agentDir(), "pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

// waitAgent waits until the agent serves: pods can run, kube-proxy and DNS
// answer.
func (c *Cluster) waitAgent(ctx context.Context) error {
	err := waitFor(ctx, 2*time.Minute, "the node agent of "+c.ID, func(context.Context) (bool, error) {
		if _, err := os.Stat(filepath.Join(c.agentDir(), agent.ReadyFile)); err == nil {
			return true, nil
		}
		if agentPid(c.agentDir(), c.tb.agentBinary()) == 0 {
			return false, errAgentExited
		}
		return false, nil
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.agentDir(), "agent.log"))
		return fmt.Errorf("%w; agent log (%s): %s", err, filepath.Join(c.agentDir(), "agent.log"), tail(log))
	}
	return nil
}

var errAgentExited = errors.New("the node agent exited")

// stopAgents kills the node agents of the testbed whose state is in dir.
func stopAgents(dir string) {
	agentDirs, _ := filepath.Glob(filepath.Join(dir, "agent-*"))
	for _, d := range agentDirs {
		if pid := agentPid(d, filepath.Join(dir, "bin", "testbed")); pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = os.Remove(filepath.Join(d, "pid"))
	}
}

// Exec runs a command in a container of a pod with `kubectl exec`, the way a
// person would, and returns its standard output and error. A command that
// exits non-zero returns an *exec.ExitError (with the exit code).
func (c *Cluster) Exec(ctx context.Context, namespace, pod, container string, stdin io.Reader, command ...string) (string, string, error) {
	args := []string{"--kubeconfig", c.Kubeconfig, "exec", "-n", namespace, pod}
	if container != "" {
		args = append(args, "-c", container)
	}
	if stdin != nil {
		args = append(args, "-i")
	}
	args = append(args, "--")
	args = append(args, command...)
	cmd := exec.CommandContext(ctx, c.tb.bin.Kubectl, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}
