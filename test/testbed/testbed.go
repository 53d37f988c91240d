package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options configure a testbed.
type Options struct {
	// Name distinguishes this testbed's state directory. Default "mcsd".
	Name string
	// Clusters is the number of clusters, c1..cN. Default 2, at most 50.
	Clusters int
	// StateRoot holds every testbed's state. Default <repo>/.cache/testbed-runs.
	StateRoot string
	// ClusterSetID is the clusterset.k8s.io value of every cluster. Default "mcsd-testbed".
	ClusterSetID string
	// NodesPerCluster is the number of kwok nodes in each cluster. Default 2.
	NodesPerCluster int
	// Ephemeral marks the testbed as owned by this process: a later Start
	// removes it if this process is gone (a test binary killed by a timeout
	// cannot run its cleanup).
	Ephemeral bool
	// Binaries are the programs to run. Default: EnsureBinaries.
	Binaries *Binaries
	// Log receives progress lines. Default: discarded.
	Log io.Writer
	// NoDataPlane leaves pods to kwok (they get an IPv4 address and turn
	// Running, and nothing runs) and starts no node agent, kube-proxy or
	// cluster DNS: a control plane alone, which needs no root (the
	// benchmark uses it). By default pods run and Services route; see
	// dataplane.go.
	NoDataPlane bool
	// SharedZones names the nodes' zones alike in every cluster (node n of
	// each cluster in zone-a, zone-b, zone-c, n modulo 3), as clusters of
	// one region have; by default each cluster's zones are its own
	// (<cluster>-zone-a, ...). A cluster's kube-proxy runs as its node 0, so
	// topology hints route every pod of the cluster as node 0's zone would.
	SharedZones bool
}

func (o *Options) defaults() error {
	if o.Name == "" {
		o.Name = "mcsd"
	}
	if o.Clusters == 0 {
		o.Clusters = 2
	}
	if o.ClusterSetID == "" {
		o.ClusterSetID = "mcsd-testbed"
	}
	if o.NodesPerCluster == 0 {
		o.NodesPerCluster = 2
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.StateRoot == "" {
		root, err := RepoRoot()
		if err != nil {
			return err
		}
		o.StateRoot = filepath.Join(root, ".cache", "testbed-runs")
	}
	// Absolute: the data plane's record of the testbed names its directory
	// for processes in any working directory.
	abs, err := filepath.Abs(o.StateRoot)
	if err != nil {
		return fmt.Errorf("testbed: state root: %w", err)
	}
	o.StateRoot = abs
	return o.validate()
}

func (o *Options) validate() error {
	if o.Clusters < 1 || o.Clusters > 50 {
		return fmt.Errorf("testbed: clusters must be between 1 and 50, got %d", o.Clusters)
	}
	if o.NodesPerCluster < 1 || o.NodesPerCluster > 200 {
		return fmt.Errorf("testbed: nodes per cluster must be between 1 and 200, got %d", o.NodesPerCluster)
	}
	if strings.ContainsAny(o.Name, "/ ") {
		return fmt.Errorf("testbed: name %q must not contain '/' or spaces", o.Name)
	}
	return nil
}

// Testbed is a set of running clusters.
type Testbed struct {
	opts     Options
	bin      Binaries
	dir      string
	Clusters []*Cluster
	// Kubeconfig is a kubeconfig file with one context per cluster, named by
	// cluster id (c1..cN).
	Kubeconfig string
}

// Cluster is one cluster of a testbed.
type Cluster struct {
	// ID is the cluster's id, its cluster.clusterset.k8s.io value and its
	// kubeconfig context name: c1..cN.
	ID string
	// Index is the cluster's number, 1..N.
	Index int
	// Kubeconfig is a kubeconfig file for this cluster alone.
	Kubeconfig string
	// Config reaches the cluster's API server as an administrator.
	Config *rest.Config
	// PodCIDR is the range the cluster's pod IPs come from; each node has a /24 of it.
	PodCIDR string
	// ServiceCIDRs are the cluster's service IP ranges (IPv4, IPv6).
	ServiceCIDRs []string

	tb *Testbed
}

// PodCIDRFor returns the pod IP range of cluster i (1-based).
func PodCIDRFor(i int) string { return fmt.Sprintf("10.%d.0.0/16", i) }

// ServiceCIDRsFor returns the service IP ranges of cluster i (1-based).
func ServiceCIDRsFor(i int) []string {
	return []string{fmt.Sprintf("10.%d.0.0/16", 100+i), fmt.Sprintf("fd00:100:%x::/108", i)}
}

// Dir returns the testbed's state directory.
func (tb *Testbed) Dir() string { return tb.dir }

// Binaries returns the programs the testbed runs.
func (tb *Testbed) Binaries() Binaries { return tb.bin }

// ClusterSetID returns the clusterset id of every cluster.
func (tb *Testbed) ClusterSetID() string { return tb.opts.ClusterSetID }

// Start brings up the testbed's clusters, or adopts those already running
// under the same name, and prepares each: CRDs, ClusterProperties, nodes.
func Start(ctx context.Context, opts Options) (*Testbed, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	var bin Binaries
	if opts.Binaries != nil {
		bin = *opts.Binaries
	} else {
		b, err := EnsureBinaries(ctx, opts.Log)
		if err != nil {
			return nil, err
		}
		bin = b
	}
	removeStale(ctx, opts.StateRoot, bin, opts.Log)
	if !opts.NoDataPlane {
		if err := checkHost(ctx, opts.Log); err != nil {
			return nil, err
		}
		removeOrphanNetworks(ctx, func(format string, args ...any) { fmt.Fprintf(opts.Log, format, args...) })
	}

	tb := &Testbed{opts: opts, bin: bin, dir: filepath.Join(opts.StateRoot, opts.Name)}
	if err := os.MkdirAll(tb.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create testbed state: %w", err)
	}
	if opts.Ephemeral {
		if err := os.WriteFile(filepath.Join(tb.dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return nil, fmt.Errorf("record testbed owner: %w", err)
		}
	}
	for i := 1; i <= opts.Clusters; i++ {
		tb.Clusters = append(tb.Clusters, &Cluster{
			ID:           fmt.Sprintf("c%d", i),
			Index:        i,
			PodCIDR:      PodCIDRFor(i),
			ServiceCIDRs: ServiceCIDRsFor(i),
			tb:           tb,
		})
	}
	// The node agent builds while the clusters come up.
	built := make(chan error, 1)
	if tb.dataPlane() {
		go func() { built <- tb.buildAgent(ctx) }()
	} else {
		built <- nil
	}
	// kwokctl runs the control plane processes in the background, so the
	// clusters come up side by side.
	errs := make(chan error, len(tb.Clusters))
	for _, c := range tb.Clusters {
		go func() { errs <- c.upWithRetry(ctx) }()
	}
	var all []error
	for range tb.Clusters {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	all = append(all, <-built)
	if err := errors.Join(all...); err != nil {
		_ = tb.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := tb.writeKubeconfig(); err != nil {
		_ = tb.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if tb.dataPlane() {
		if err := tb.startDataPlane(ctx); err != nil {
			_ = tb.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return tb, nil
}

// startDataPlane sets up the network and starts every cluster's node agent.
func (tb *Testbed) startDataPlane(ctx context.Context) error {
	if err := tb.setupNetwork(ctx); err != nil {
		return err
	}
	for _, c := range tb.Clusters {
		cfg, changed, err := c.agentConfig()
		if err != nil {
			return err
		}
		if err := c.prepareDataPlane(ctx, cfg); err != nil {
			return fmt.Errorf("data plane of %s: %w", c.ID, err)
		}
		if err := c.startAgent(cfg, changed); err != nil {
			return err
		}
	}
	for _, c := range tb.Clusters {
		if err := c.waitAgent(ctx); err != nil {
			return err
		}
		fmt.Fprintf(tb.opts.Log, "[testbed] %s: pods run, kube-proxy and DNS serve (namespace %s)\n", c.ID, c.NodeNetns())
	}
	return nil
}

// Close stops every process of the testbed and removes its state.
func (tb *Testbed) Close(ctx context.Context) error {
	err := deleteTestbed(ctx, tb.dir, tb.bin, tb.opts.Log)
	return err
}

// Cluster returns the cluster with the given id, or nil.
func (tb *Testbed) Cluster(id string) *Cluster {
	for _, c := range tb.Clusters {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// kwokDir is the cluster's own kwokctl work directory: kwokctl keeps shared
// state (its CA) in a work directory, so clusters created side by side need one each.
func (c *Cluster) kwokDir() string { return filepath.Join(c.tb.dir, "kwok-"+c.ID) }

func (c *Cluster) kwokctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, c.tb.bin.Kwokctl, append(args, "--name", c.ID)...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+c.kwokDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kwokctl %s --name %s: %w: %s", strings.Join(args, " "), c.ID, err, tail(out))
	}
	return nil
}

func tail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

func (c *Cluster) clusterDir() string { return filepath.Join(c.kwokDir(), "clusters", c.ID) }

// upWithRetry brings the cluster up, and on a failure deletes it and tries
// once more: on a loaded machine a control plane component occasionally
// fails to start (a port taken in the meantime, say), and a fresh start
// fixes that. The first failure's diagnostics go to the log.
func (c *Cluster) upWithRetry(ctx context.Context) error {
	err := c.up(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	fmt.Fprintf(c.tb.opts.Log, "[testbed] %s: %v; kwok-controller log:\n%s\n[testbed] %s: deleting it and trying again\n",
		c.ID, err, c.componentLog(ctx, "kwok-controller"), c.ID)
	if derr := c.kwokctl(ctx, "delete", "cluster", "--kubeconfig", filepath.Join(c.kwokDir(), "unused-kubeconfig")); derr != nil {
		return errors.Join(err, derr)
	}
	killUnder(c.kwokDir(), c.tb.opts.Log)
	_ = os.RemoveAll(c.kwokDir())
	if err := c.up(ctx); err != nil {
		return fmt.Errorf("%s failed twice: %w", c.ID, err)
	}
	return nil
}

// componentLog returns the end of a control plane component's log.
func (c *Cluster) componentLog(ctx context.Context, component string) string {
	cmd := exec.CommandContext(ctx, c.tb.bin.Kwokctl, "logs", component, "--name", c.ID)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+c.kwokDir())
	out, _ := cmd.CombinedOutput()
	return tail(out)
}

func (c *Cluster) up(ctx context.Context) error {
	c.Kubeconfig = filepath.Join(c.clusterDir(), "kubeconfig.yaml")
	if _, err := os.Stat(c.Kubeconfig); err == nil {
		// Created before: make sure its processes run.
		fmt.Fprintf(c.tb.opts.Log, "[testbed] %s: already created, starting it if stopped\n", c.ID)
		if err := c.kwokctl(ctx, "start", "cluster", "--wait", "2m"); err != nil {
			return err
		}
	} else {
		cfgPath := filepath.Join(c.tb.dir, c.ID+"-kwokctl.yaml")
		ports, err := FreePorts(6)
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfgPath, []byte(c.kwokctlConfig(ports)), 0o644); err != nil {
			return fmt.Errorf("write kwokctl config: %w", err)
		}
		fmt.Fprintf(c.tb.opts.Log, "[testbed] %s: creating cluster\n", c.ID)
		if err := c.kwokctl(ctx, "create", "cluster", "--config", cfgPath, "--kubeconfig=", "--wait", "2m", "--timeout", "4m"); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig of %s: %w", c.ID, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.Config = cfg
	if err := c.prepare(ctx); err != nil {
		return fmt.Errorf("prepare %s: %w", c.ID, err)
	}
	fmt.Fprintf(c.tb.opts.Log, "[testbed] %s: ready at %s\n", c.ID, cfg.Host)
	return nil
}

// kwokctlConfig is the cluster's kwokctl configuration. kwokctl picks the same
// "random" ports in every work directory, so the ports are chosen here.
func (c *Cluster) kwokctlConfig(ports []int) string {
	b := c.tb.bin
	return fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  kubeVersion: %s
  etcdVersion: %s
  kwokVersion: %s
  kubeApiserverBinary: %s
  kubeControllerManagerBinary: %s
  kubeSchedulerBinary: %s
  kubectlBinary: %s
  etcdBinary: %s
  kwokControllerBinary: %s
  securePort: true
  kubeAuthorization: true
  kubeAdmission: true
  disableQPSLimits: true
  kubeApiserverPort: %d
  etcdPort: %d
  etcdPeerPort: %d
  kubeControllerManagerPort: %d
  kubeSchedulerPort: %d
  kwokControllerPort: %d
%scomponentsPatches:
- name: kube-apiserver
  extraArgs:
  - key: service-cluster-ip-range
    value: %s
- name: kwok-controller
  extraArgs:
  - key: cidr
    value: %s
%s`, b.KubernetesVersion, strings.TrimPrefix(b.EtcdVersion, "v"), b.KwokVersion,
		b.KubeAPIServer, b.KubeControllerManager, b.KubeScheduler, b.Kubectl, b.Etcd, b.Kwok,
		ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], c.apiServiceOptions(),
		strings.Join(c.ServiceCIDRs, ","), c.PodCIDR, c.dataPlaneConfig())
}

// APIServiceIPs are the cluster IPs of cluster i's kubernetes Service
// (default/kubernetes): the first address of each Service range.
func APIServiceIPs(i int) []string {
	return []string{fmt.Sprintf("10.%d.0.1", 100+i), fmt.Sprintf("fd00:100:%x::1", i)}
}

// apiServiceOptions makes, with a data plane, the API server reachable from
// pods as in-cluster clients reach it: its certificate names the kubernetes
// Service's cluster IPs, and the address it publishes as that Service's
// endpoint is node 0's, where the agent relays to it.
func (c *Cluster) apiServiceOptions() string {
	if !c.tb.dataPlane() {
		return ""
	}
	sans := APIServiceIPs(c.Index)
	return fmt.Sprintf("  kubeApiserverCertSANs:\n  - %s\n  - %s\n", sans[0], sans[1])
}

// dataPlaneConfig adds, with a data plane, the API server's client
// certificate for kubelets (the agent's streaming server requires one signed
// by the cluster's CA) and the kwok stages that leave pods to the agent.
func (c *Cluster) dataPlaneConfig() string {
	if !c.tb.dataPlane() {
		return ""
	}
	return fmt.Sprintf(`- name: kube-apiserver
  extraArgs:
  - key: advertise-address
    value: %s
  - key: kubelet-client-certificate
    value: %s
  - key: kubelet-client-key
    value: %s
%s`, NodeIPs(c.Index, 0)[0], c.pkiFile("admin.crt"), c.pkiFile("admin.key"), nodeStages(c.tb.bin.KubernetesVersion))
}

// Client returns a controller-runtime client for the cluster, with the
// schemes of every API mcsd uses.
func (c *Cluster) Client() (client.Client, error) {
	cl, err := client.New(c.Config, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", c.ID, err)
	}
	return cl, nil
}

// Stop stops the cluster's processes, keeping its state (a cluster outage).
func (c *Cluster) Stop(ctx context.Context) error {
	return c.kwokctl(ctx, "stop", "cluster")
}

// Restart starts the processes of a stopped cluster and waits until it serves.
func (c *Cluster) Restart(ctx context.Context) error {
	return c.kwokctl(ctx, "start", "cluster", "--wait", "2m")
}

func (tb *Testbed) writeKubeconfig() error {
	merged := clientcmdapi.NewConfig()
	for _, c := range tb.Clusters {
		cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
		if err != nil {
			return fmt.Errorf("load kubeconfig of %s: %w", c.ID, err)
		}
		cur := cfg.Contexts[cfg.CurrentContext]
		if cur == nil {
			return fmt.Errorf("kubeconfig of %s has no current context", c.ID)
		}
		merged.Clusters[c.ID] = cfg.Clusters[cur.Cluster]
		merged.AuthInfos[c.ID] = cfg.AuthInfos[cur.AuthInfo]
		merged.Contexts[c.ID] = &clientcmdapi.Context{Cluster: c.ID, AuthInfo: c.ID}
	}
	merged.CurrentContext = tb.Clusters[0].ID
	tb.Kubeconfig = filepath.Join(tb.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*merged, tb.Kubeconfig); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// deleteTestbed deletes every cluster kwokctl knows in the testbed's state
// directory, stops any process still running from it, then removes it.
func deleteTestbed(ctx context.Context, dir string, bin Binaries, log io.Writer) error {
	stopAgents(dir)
	workdirs, _ := filepath.Glob(filepath.Join(dir, "kwok-*"))
	var errs []error
	for _, wd := range workdirs {
		clusters, _ := os.ReadDir(filepath.Join(wd, "clusters"))
		for _, e := range clusters {
			if !e.IsDir() {
				continue
			}
			cmd := exec.CommandContext(ctx, bin.Kwokctl, "delete", "cluster", "--name", e.Name(), "--kubeconfig", filepath.Join(wd, "unused-kubeconfig"))
			cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+wd)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("kwokctl delete cluster %s: %w: %s", e.Name(), err, tail(out)))
			} else {
				fmt.Fprintf(log, "[testbed] %s: deleted\n", e.Name())
			}
		}
	}
	// kwokctl runs binaries through links in the work directory; anything
	// left running from there (a half-created cluster) is killed.
	killUnder(dir, log)
	if err := removeNetwork(ctx, dir); err != nil {
		errs = append(errs, fmt.Errorf("remove the testbed's network namespaces: %w", err))
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove testbed state: %w", err))
	}
	return errors.Join(errs...)
}

// killUnder kills every process whose command line starts with a path in dir.
func killUnder(dir string, log io.Writer) {
	for pid, argv0 := range ProcessesUnder(dir) {
		fmt.Fprintf(log, "[testbed] killing leftover process %d %s\n", pid, argv0)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// ProcessesUnder returns the processes whose program is a path in dir: pid
// → that path.
func ProcessesUnder(dir string) map[int]string {
	out := map[int]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		argv0, _, _ := strings.Cut(string(data), "\x00")
		if !strings.HasPrefix(argv0, dir+string(filepath.Separator)) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		out[pid] = argv0
	}
	return out
}

// removeStale deletes ephemeral testbeds whose owning process is gone.
func removeStale(ctx context.Context, root string, bin Binaries, log io.Writer) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || processAlive(pid) {
			continue
		}
		fmt.Fprintf(log, "[testbed] removing stale testbed %s (owner %d is gone)\n", e.Name(), pid)
		_ = deleteTestbed(ctx, dir, bin, log)
	}
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// handedOut are the ports FreePorts and FreePort returned in this process:
// never returned twice, so that clusters started at once (each picking its
// ports while the others' are not bound yet) do not get the same one.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago and that this process has not handed out before.
//
// They are taken below the kernel's ephemeral range when there is room:
// the testbed binds a port a moment after choosing it, and in that moment
// an outgoing connection of any process on the machine (a control plane
// of another test package, its clients) may be given a port of that range
// as its own, and the bind would fail.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	handedOut.Lock()
	defer handedOut.Unlock()
	lo, hi := portsBelowEphemeral()
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries > n+1000 {
			return nil, errors.New("find a free port: every port offered was taken or handed out already")
		}
		addr := "127.0.0.1:0"
		if hi > lo {
			addr = "127.0.0.1:" + strconv.Itoa(lo+rand.IntN(hi-lo))
		}
		l, err := net.Listen("tcp", addr)
		if hi > lo && errors.Is(err, syscall.EADDRINUSE) {
			continue // taken: try another
		}
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l) // held until the end: not offered again meanwhile
		if port := l.Addr().(*net.TCPAddr).Port; !handedOut.ports[port] {
			handedOut.ports[port] = true
			out = append(out, port)
		}
	}
	return out, nil
}

// portsBelowEphemeral is the range [lo, hi) FreePorts picks from: from
// 10000 up to the kernel's ephemeral range, or an empty range when that
// starts too low to leave room (FreePorts then lets the kernel choose).
func portsBelowEphemeral() (lo, hi int) {
	const first, room = 10000, 4096
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	start, err := strconv.Atoi(f[0])
	if err != nil || start-first < room {
		return 0, 0
	}
	return first, start
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago (see
// FreePorts).
func FreePort() (int, error) {
	p, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

const defaultWait = 2 * time.Minute

// waitFor polls cond until it returns true, an error, or the timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("wait for %s: %w (last error: %w)", what, ctx.Err(), last)
			}
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Delete stops and removes the testbed named in opts, whether or not this
// process started it.
func Delete(ctx context.Context, opts Options) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	dir := filepath.Join(opts.StateRoot, opts.Name)
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		fmt.Fprintf(opts.Log, "[testbed] %s: nothing to remove\n", opts.Name)
		return nil
	}
	bin := opts.Binaries
	if bin == nil {
		b, err := EnsureBinaries(ctx, opts.Log)
		if err != nil {
			return err
		}
		bin = &b
	}
	return deleteTestbed(ctx, dir, *bin, opts.Log)
}

// KubeconfigPath returns where the testbed named in opts keeps its kubeconfig.
func KubeconfigPath(opts Options) (string, error) {
	if err := opts.defaults(); err != nil {
		return "", err
	}
	return filepath.Join(opts.StateRoot, opts.Name, "kubeconfig"), nil
}

// Ping checks that every cluster's API server answers, within a few
// seconds.
func (tb *Testbed) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if len(tb.Clusters) == 0 {
		return errors.New("it has no clusters")
	}
	for _, c := range tb.Clusters {
		cs, err := kubernetes.NewForConfig(c.Config)
		if err != nil {
			return fmt.Errorf("%s: %w", c.ID, err)
		}
		if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			return fmt.Errorf("%s's API server does not answer: %w", c.ID, err)
		}
	}
	return nil
}

// Open returns the running testbed named in opts without starting or
// preparing anything: for commands that act on a testbed `up` started.
func Open(ctx context.Context, opts Options) (*Testbed, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	tb := &Testbed{opts: opts, dir: filepath.Join(opts.StateRoot, opts.Name)}
	tb.Kubeconfig = filepath.Join(tb.dir, "kubeconfig")
	if _, err := os.Stat(tb.Kubeconfig); err != nil {
		return nil, fmt.Errorf("testbed %s is not up: %w", opts.Name, err)
	}
	if opts.Binaries != nil {
		tb.bin = *opts.Binaries
	} else {
		b, err := EnsureBinaries(ctx, opts.Log)
		if err != nil {
			return nil, err
		}
		tb.bin = b
	}
	for i := 1; ; i++ {
		c := &Cluster{ID: fmt.Sprintf("c%d", i), Index: i, PodCIDR: PodCIDRFor(i), ServiceCIDRs: ServiceCIDRsFor(i), tb: tb}
		c.Kubeconfig = filepath.Join(c.clusterDir(), "kubeconfig.yaml")
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			break
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig of %s: %w", c.ID, err)
		}
		c.Config = cfg
		tb.Clusters = append(tb.Clusters, c)
	}
	if len(tb.Clusters) == 0 {
		return nil, fmt.Errorf("testbed %s has no clusters", opts.Name)
	}
	return tb, nil
}
