package image

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	etcdregistry "github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded/embeddedtest"
	fw "github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

const (
	// mcsdNS is where both install paths put mcsd.
	mcsdNS = "mcsd-system"
	// timeout bounds each wait: mcsd's startup probe runs every 10 s.
	timeout = 3 * time.Minute
)

var mcsdLabels = map[string]string{"app.kubernetes.io/name": "mcsd"}

// TestShippedImage builds the image, loads it into the testbed, installs it
// in c1 with kubectl apply -k and in c2 with helm install, and carries
// traffic from c2 to c1 through the two mcsd pods it runs.
func TestShippedImage(t *testing.T) {
	fw.NeedEnv(t, env)
	ctx := t.Context()
	work := t.TempDir()

	// The image, as make image builds it, loaded as kind load image-archive
	// loads one.
	build := exec.CommandContext(ctx, "go", "run", "./hack/image", "build", "-out", filepath.Join(work, "image"), "-tag", "mcsd:dev")
	build.Dir = fw.RepoPath(t, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the image: %v\n%s", err, out)
	}
	refs, err := env.TB.LoadImage(filepath.Join(work, "image", "mcsd-image-"+runtime.GOARCH+".docker.tar"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %v", refs)

	// The registry: etcd over TLS with client certificates and auth on; each
	// cluster is its own etcd user, as mcsd registry setup-auth makes them:
	// c1 by its certificate's common name, c2 by a password (its
	// certificate names no etcd user).
	reg := startRegistry(t, filepath.Join(work, "registry"))
	endpoints := map[string]string{}
	for _, id := range []string{"c1", "c2"} {
		addr, err := env.TB.Cluster(id).ExposeHost(ctx, reg.hostAddr)
		if err != nil {
			t.Fatal(err)
		}
		endpoints[id] = addr
	}

	installWithKustomize(t, "c1", endpoints["c1"], reg, work)
	installWithHelm(t, "c2", endpoints["c2"], reg)
	pods := map[string]*corev1.Pod{}
	for _, id := range []string{"c1", "c2"} {
		pods[id] = waitMcsdReady(t, id)
	}

	t.Run("the sample app exported in c1 is reached from c2 by its clusterset name", func(t *testing.T) {
		const ns = "demo" // config/samples'
		kubectl(t, "c1", "apply", "-f", fw.RepoPath(t, "config/samples/app.yaml"), "-f", fw.RepoPath(t, "config/samples/serviceexport.yaml"))
		c1Pods := env.WaitPodsReady(t, "c1", ns, map[string]string{"app": "web"}, 2, nil)
		fw.EnsureNamespace(t, env.Client(t, "c2"), ns)
		client := env.StartPod(t, "c2", ns, corev1.Container{Name: "client", Image: "registry.k8s.io/pause:3.10"})
		url := "http://web." + ns + ".svc.clusterset.local/hostname"
		poll.Until(t, timeout, "replies from c1's pods at "+url, func() (bool, string) {
			out, code := env.Shell(t, "c2", ns, client, fmt.Sprintf("for i in $(seq 10); do curl -s -m 2 %s; echo; done", url))
			got := fw.Origins(fw.Lines(out), map[string][]string{"c1": c1Pods})
			return code == 0 && got["c1"] == 10, fmt.Sprintf("exit %d, replies by cluster %v", code, got)
		})
	})

	t.Run("the container is the image's", func(t *testing.T) {
		for id, pod := range pods {
			c := env.TB.Cluster(id)
			now := &corev1.Pod{}
			if err := env.Client(t, id).Get(ctx, client.ObjectKeyFromObject(pod), now); err != nil {
				t.Fatal(err)
			}
			if cs := now.Status.ContainerStatuses[0]; cs.RestartCount != 0 {
				t.Errorf("%s: mcsd restarted %d times (last: %+v)", id, cs.RestartCount, cs.LastTerminationState.Terminated)
			}
			// No shell: kubectl exec fails as it would on a distroless image.
			stdout, stderr, err := c.Exec(ctx, mcsdNS, pod.Name, "mcsd", nil, "sh", "-c", "true")
			if err == nil {
				t.Errorf("%s: kubectl exec sh in mcsd succeeded (%q): the image has a shell", id, stdout)
			} else if !strings.Contains(stderr, "executable file not found") {
				t.Errorf("%s: kubectl exec sh: %v: %s; want executable file not found", id, err, stderr)
			}
			pid, err := c.ContainerPID(ctx, pod.Status.ContainerStatuses[0].ContainerID)
			if err != nil {
				t.Fatal(err)
			}
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"Uid:\t65532\t65532\t65532\t65532", "Gid:\t65532\t65532\t65532\t65532", "CapEff:\t0000000000000000", "NoNewPrivs:\t1"} {
				if !strings.Contains(string(status), want) {
					t.Errorf("%s: mcsd's process status lacks %q:\n%s", id, want, status)
				}
			}
			// A write through the container's root, even as root, meets its
			// read-only mount.
			probe := fmt.Sprintf("/proc/%d/root/written-by-test", pid)
			err = os.WriteFile(probe, []byte("x"), 0o644)
			if !errors.Is(err, syscall.EROFS) {
				_ = os.Remove(probe)
				t.Errorf("%s: write to mcsd's root file system: %v; want read-only file system", id, err)
			}
		}
	})
}

// registry is the test's etcd.
type registry struct {
	hostAddr string // host:port on the host's loopback
	certs    string // WriteCerts' directory
	users    map[string]etcdregistry.AuthUser
}

func startRegistry(t *testing.T, dir string) registry {
	t.Helper()
	set := env.TB.ClusterSetID()
	hosts := []string{"127.0.0.1"}
	for i := 1; i <= 2; i++ {
		hosts = append(hosts, testbed.NodeIPs(i, 0)[0])
	}
	certs := filepath.Join(dir, "certs")
	clients := []embedded.ClientCert{{Name: "root", CommonName: etcdregistry.RootUser}}
	clients = append(clients, embedded.ClientCert{Name: "c1", CommonName: etcdregistry.ClusterUser(set, "c1")},
		embedded.ClientCert{Name: "c2", CommonName: "transport-only-c2"})
	if err := embedded.WriteCerts(certs, hosts, clients); err != nil {
		t.Fatal(err)
	}
	srv := embeddedtest.Start(t, embedded.Config{
		DataDir:         filepath.Join(dir, "data"),
		ListenClientURL: "https://127.0.0.1:0",
		CertFile:        filepath.Join(certs, "server.crt"),
		KeyFile:         filepath.Join(certs, "server.key"),
		TrustedCAFile:   filepath.Join(certs, "ca.crt"),
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tlsCfg, err := transport.TLSConfigFor(&transport.Config{TLS: transport.TLSConfig{
		CAFile: filepath.Join(certs, "ca.crt"), CertFile: filepath.Join(certs, "root.crt"), KeyFile: filepath.Join(certs, "root.key")}})
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.MinVersion = tls.VersionTLS12
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	users, err := etcdregistry.SetupAuth(ctx, cli, etcdregistry.AuthOptions{ClusterSet: set, Clusters: []string{"c1", "c2"}, Passwords: true, EnableAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	reg := registry{hostAddr: strings.TrimPrefix(srv.ClientURL(), "https://"), certs: certs, users: map[string]etcdregistry.AuthUser{}}
	for _, u := range users {
		reg.users[u.Cluster] = u
	}
	return reg
}

// registrySecret creates, as the README says, Secret mcsd-registry-etcd
// with the CA and the cluster's client certificate.
func registrySecret(t *testing.T, id string, reg registry) {
	t.Helper()
	data := map[string][]byte{}
	for key, file := range map[string]string{"ca.crt": "ca.crt", "tls.crt": id + ".crt", "tls.key": id + ".key"} {
		b, err := os.ReadFile(filepath.Join(reg.certs, file))
		if err != nil {
			t.Fatal(err)
		}
		data[key] = b
	}
	cl := env.Client(t, id)
	fw.EnsureNamespace(t, cl, mcsdNS)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mcsdNS, Name: "mcsd-registry-etcd"}, Data: data}
	if err := cl.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
}

// installWithKustomize applies, with kubectl apply -k, an overlay of
// config/overlays/etcd that names the registry's endpoint and the loaded
// image, as a user's own overlay would.
func installWithKustomize(t *testing.T, id, endpoint string, reg registry, work string) {
	t.Helper()
	registrySecret(t, id, reg)
	dir := filepath.Join(work, "overlay-"+id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(dir, fw.RepoPath(t, "config/overlays/etcd"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: mcsd
  newName: mcsd
  newTag: dev
configMapGenerator:
- name: mcsd-registry
  namespace: mcsd-system
  behavior: replace
  literals:
  - MCSD_REGISTRY=etcds://%s
`, base, endpoint)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, id, "apply", "--server-side", "--force-conflicts", "-k", dir)
}

// kubectl runs the testbed's kubectl against cluster id.
func kubectl(t *testing.T, id string, args ...string) {
	t.Helper()
	c := env.TB.Cluster(id)
	out, err := exec.Command(env.TB.Binaries().Kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s in %s: %v\n%s", strings.Join(args, " "), id, err, out)
	}
}

// installWithHelm installs the chart, naming the loaded image and the
// registry's endpoint, with the cluster's etcd user and password from
// Secret mcsd-registry-etcd-auth; the testbed installed the CRDs already.
func installWithHelm(t *testing.T, id, endpoint string, reg registry) {
	t.Helper()
	registrySecret(t, id, reg)
	u := reg.users[id]
	auth := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mcsdNS, Name: "mcsd-registry-etcd-auth"},
		Data: map[string][]byte{"username": []byte(u.Name), "password": []byte(u.Password)}}
	if err := env.Client(t, id).Create(context.Background(), auth); err != nil {
		t.Fatal(err)
	}
	c := env.TB.Cluster(id)
	if _, err := fw.Helm(t, "--kubeconfig", c.Kubeconfig, "install", "mcsd", "charts/mcsd", "--namespace", mcsdNS,
		"--set", "crds.install=false", "--set", "image.repository=mcsd", "--set", "image.tag=dev",
		"--set", "registry.etcd.endpoints={"+endpoint+"}", "--set", "registry.etcd.auth.secretName="+auth.Name); err != nil {
		t.Fatal(err)
	}
}

// waitMcsdReady waits until cluster id's mcsd pod is ready on its probes,
// running from the image, and returns it.
func waitMcsdReady(t *testing.T, id string) *corev1.Pod {
	t.Helper()
	cl := env.Client(t, id)
	var ready *corev1.Pod
	poll.Until(t, timeout, "mcsd ready in "+id, func() (bool, string) {
		var pods corev1.PodList
		if err := cl.List(context.Background(), &pods, client.InNamespace(mcsdNS), client.MatchingLabels(mcsdLabels)); err != nil {
			return false, err.Error()
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if len(p.Status.ContainerStatuses) == 0 {
				states = append(states, p.Name+": no container status")
				continue
			}
			cs := p.Status.ContainerStatuses[0]
			if cs.Ready && strings.HasPrefix(cs.ContainerID, "runc://") {
				ready = p
				return true, ""
			}
			states = append(states, fmt.Sprintf("%s: ready %v, id %q, state %+v", p.Name, cs.Ready, cs.ContainerID, cs.State))
		}
		return false, strings.Join(states, "; ")
	})
	return ready
}
