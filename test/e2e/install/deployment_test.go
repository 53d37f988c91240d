package install

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	etcdregistry "github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
	fw "github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// TestDeploymentAsRendered runs the built mcsd binary as the chart's
// Deployment runs it, against c1 and an etcd that requires TLS client
// certificates: the rendered args and environment (the ConfigMap's registry
// URL, POD_NAMESPACE), the registry Secret's files written with the
// volume's mode and the pod's fsGroup, and the paths in the args pointed at
// them, the pod's user and group with no capabilities, and a read-only
// working directory, HOME and TMPDIR (the read-only root filesystem). Only
// the API server is reached differently: through a kubeconfig holding a
// token of the rendered ServiceAccount, in place of the in-cluster config.
// /readyz on the probe's port and path turns ready, and an export flows
// through the registry into the cluster's import. Twice: with the chart's
// defaults (a client certificate), and with password authentication (etcd
// with auth on, the cluster's user made by SetupAuth, its name and password
// from a Secret in the environment).
func TestDeploymentAsRendered(t *testing.T) {
	needTestbed(t)
	t.Run("client certificate", func(t *testing.T) { deploymentAsRendered(t, "mcsd-deploy", false) })
	t.Run("password", func(t *testing.T) { deploymentAsRendered(t, "mcsd-deploy-pw", true) })
}

func deploymentAsRendered(t *testing.T, release string, password bool) {
	ns := release
	c := env.TB.Cluster("c1")
	cl := adminClient(t, c)
	ctx := context.Background()
	root := sharedTempDir(t)

	pki := newPKI(t, filepath.Join(root, "pki"))
	values := []string{"template", release, "charts/mcsd", "--namespace", ns}
	// The Secrets as README says to create them, by name.
	secrets := map[string]map[string][]byte{}
	var etcdURL string
	if password {
		var user, pass string
		etcdURL, user, pass = startPasswordEtcd(t, filepath.Join(root, "etcd"), pki)
		values = append(values, helmEtcdPassword...)
		secrets["mcsd-registry-etcd"] = map[string][]byte{"ca.crt": pki.caPEM}
		secrets["mcsd-registry-etcd-auth"] = map[string][]byte{"username": []byte(user), "password": []byte(pass)}
	} else {
		etcdURL = startTLSEtcd(t, filepath.Join(root, "etcd"), pki, true)
		secrets["mcsd-registry-etcd"] = map[string][]byte{"ca.crt": pki.caPEM, "tls.crt": pki.clientCertPEM, "tls.key": pki.clientKeyPEM}
	}
	health, metrics := freePort(t), freePort(t)
	out, err := helm(t, append(values,
		"--set", "registry.etcd.endpoints={"+strings.TrimPrefix(etcdURL, "https://")+"}",
		"--set", fmt.Sprintf("healthPort=%d", health), "--set", fmt.Sprintf("metricsPort=%d", metrics))...)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	d := m.deployment(t)
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]

	// The settings the run below reproduces.
	psc, csc := pod.SecurityContext, ctr.SecurityContext
	if psc == nil || csc == nil || psc.RunAsUser == nil || psc.RunAsGroup == nil || psc.FSGroup == nil ||
		!ptrTrue(psc.RunAsNonRoot) || *psc.RunAsUser != 65532 || !ptrTrue(csc.ReadOnlyRootFilesystem) ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0 {
		t.Fatalf("security contexts: pod %+v, container %+v", psc, csc)
	}
	uid, gid, fsGroup := uint32(*psc.RunAsUser), uint32(*psc.RunAsGroup), uint32(*psc.FSGroup)

	// The release's objects, the Deployment aside, and the registry Secrets.
	apply(t, ctx, cl, manifests{namespace(ns)})
	t.Cleanup(func() { _ = cl.Delete(context.Background(), namespace(ns)) })
	for _, u := range m {
		switch u.GetKind() {
		case "Deployment", "CustomResourceDefinition":
			continue
		}
		apply(t, ctx, cl, manifests{u})
		if u.GetNamespace() == "" {
			t.Cleanup(func() { _ = cl.Delete(context.Background(), u) })
		}
	}
	for name, data := range secrets {
		if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}

	// Environment: envFrom ConfigMaps and env, as the kubelet resolves them.
	vars := map[string]string{}
	for _, ef := range ctr.EnvFrom {
		cm := &corev1.ConfigMap{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: ef.ConfigMapRef.Name}, cm); err != nil {
			t.Fatal(err)
		}
		for k, v := range cm.Data {
			vars[k] = v
		}
	}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			vars[e.Name] = ns
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			secret := &corev1.Secret{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, secret); err != nil {
				t.Fatalf("env %s: %v", e.Name, err)
			}
			v, ok := secret.Data[ref.Key]
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			vars[e.Name] = string(v)
		default:
			t.Fatalf("env %s: unsupported source %+v", e.Name, e.ValueFrom)
		}
	}

	// Volumes: each Secret's keys as files, with the volume's mode, owned by
	// the pod's fsGroup, in a directory standing for the mount path.
	mounts := map[string]string{}
	for i, vm := range ctr.VolumeMounts {
		vi := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if vi < 0 || pod.Volumes[vi].Secret == nil {
			t.Fatalf("volume mount %s: not a Secret volume", vm.Name)
		}
		vol := pod.Volumes[vi].Secret
		secret := &corev1.Secret{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: vol.SecretName}, secret); err != nil {
			t.Fatalf("volume %s: %v", vm.Name, err)
		}
		dir := filepath.Join(root, fmt.Sprintf("volume-%d", i))
		mkdir(t, dir, 0o755)
		mode := os.FileMode(0o644)
		if vol.DefaultMode != nil {
			mode = os.FileMode(*vol.DefaultMode)
		}
		for k, v := range secret.Data {
			p := filepath.Join(dir, k)
			if err := os.WriteFile(p, v, mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, 0, int(fsGroup)); err != nil {
				t.Fatal(err)
			}
		}
		mounts[vm.MountPath] = dir
	}

	// Args: $(VAR) expanded, mount paths pointed at the directories above.
	var args []string
	for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
		a = expandVars(a, vars)
		for mp, dir := range mounts {
			a = strings.ReplaceAll(a, strings.TrimSuffix(mp, "/")+"/", dir+"/")
		}
		args = append(args, a)
	}

	readOnly := filepath.Join(root, "rootfs")
	mkdir(t, readOnly, 0o555)
	kubeconfig := writeServiceAccountKubeconfig(t, c, ns, m.serviceAccount(t).Name, filepath.Join(root, "kubeconfig"))
	environ := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + readOnly, "TMPDIR=" + readOnly, "KUBECONFIG=" + kubeconfig}
	for k, v := range vars {
		environ = append(environ, k+"="+v)
	}

	bin := buildMcsd(t, filepath.Join(root, "bin"))
	logPath := filepath.Join(root, "mcsd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = readOnly, environ, logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{fsGroup}}, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			t.Logf("mcsd stopped: %v", err)
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Logf("mcsd killed after 30s: %v", <-exited)
		}
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("mcsd log:\n%s", tailLines(string(b), 40))
		}
	})

	// The probes, on their named port and path.
	probe := func(p *corev1.Probe) string {
		t.Helper()
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("probe %+v is not an HTTP GET", p)
		}
		port := p.HTTPGet.Port.IntValue()
		if p.HTTPGet.Port.Type == intstr.String {
			i := slices.IndexFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.HTTPGet.Port.StrVal })
			if i < 0 {
				t.Fatalf("probe port %s is no container port", p.HTTPGet.Port.StrVal)
			}
			port = int(ctr.Ports[i].ContainerPort)
		}
		return fmt.Sprintf("http://127.0.0.1:%d%s", port, p.HTTPGet.Path)
	}
	for _, url := range []string{probe(ctr.ReadinessProbe), probe(ctr.LivenessProbe), probe(ctr.StartupProbe)} {
		poll.Until(t, 60*time.Second, "mcsd answers "+url, func() (bool, string) {
			select {
			case err := <-exited:
				exited <- err
				b, _ := os.ReadFile(logPath)
				t.Fatalf("mcsd exited: %v\n%s", err, tailLines(string(b), 40))
			default:
			}
			resp, err := http.Get(url)
			if err != nil {
				return false, err.Error()
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(body))
		})
	}

	// An export flows: c1's export, through the TLS registry, into c1's import.
	app := release + "-flow"
	fw.EnsureNamespace(t, cl, app)
	t.Cleanup(func() { _ = cl.Delete(context.Background(), namespace(app)) })
	fw.Deploy(t, cl, fw.App{Namespace: app, Name: "web", Replicas: 1})
	fw.Export(t, cl, app, "web")
	poll.Until(t, timeout, "import of c1's export in c1", func() (bool, string) {
		si := fw.GetImport(t, cl, app, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		return slices.Equal(clusterNames(si), []string{"c1"}), fmt.Sprintf("status.clusters %v", si.Status.Clusters)
	})
	// Withdrawn while mcsd runs, so that no finalizer is left behind.
	fw.Unexport(t, cl, app, "web")
	poll.Until(t, timeout, "export withdrawn and import gone", func() (bool, string) {
		se := &mcsv1beta1.ServiceExport{}
		err := cl.Get(ctx, client.ObjectKey{Namespace: app, Name: "web"}, se)
		return client.IgnoreNotFound(err) == nil && err != nil && fw.GetImport(t, cl, app, "web") == nil, fmt.Sprintf("ServiceExport: %v", err)
	})
}

func clusterNames(si *mcsv1beta1.ServiceImport) []string {
	var out []string
	for _, c := range si.Status.Clusters {
		out = append(out, c.Cluster)
	}
	return out
}

func ptrTrue(b *bool) bool { return b != nil && *b }

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandVars expands $(VAR) references as the kubelet does in args; an
// unknown reference stays as it is.
func expandVars(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := vars[varRef.FindStringSubmatch(ref)[1]]; ok {
			return v
		}
		return ref
	})
}

// sharedTempDir is a temporary directory other users may enter (mode
// 0755), removed when the test ends.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcsd-deployment-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := testbed.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// buildMcsd builds the static binary as make image-binary does.
func buildMcsd(t *testing.T, dir string) string {
	t.Helper()
	mkdir(t, dir, 0o755)
	bin := filepath.Join(dir, "mcsd")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/mcsd")
	cmd.Dir = repoPath(t, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// writeServiceAccountKubeconfig writes, readable by anyone, a kubeconfig
// that reaches c with a token of ServiceAccount ns/name and c's CA inline.
func writeServiceAccountKubeconfig(t *testing.T, c *testbed.Cluster, ns, name, path string) string {
	t.Helper()
	cfg := serviceAccountConfig(t, c, ns, name)
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		ca = b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// pki holds a CA and certificates signed by it, PEM-encoded, and the paths
// of the server's files.
type pki struct {
	caPEM, clientCertPEM, clientKeyPEM    []byte
	caFile, serverCertFile, serverKeyFile string
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	mkdir(t, dir, 0o700)
	ca, caKey, caPEM, _ := certificate(t, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mcsd-test-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
	}
	p := &pki{
		caPEM:          caPEM,
		caFile:         filepath.Join(dir, "ca.crt"),
		serverCertFile: filepath.Join(dir, "server.crt"),
		serverKeyFile:  filepath.Join(dir, "server.key"),
	}
	_, _, serverCert, serverKey := certificate(t, leaf(2, "etcd", x509.ExtKeyUsageServerAuth), ca, caKey)
	_, _, p.clientCertPEM, p.clientKeyPEM = certificate(t, leaf(3, "mcsd", x509.ExtKeyUsageClientAuth), ca, caKey)
	for path, data := range map[string][]byte{p.caFile: p.caPEM, p.serverCertFile: serverCert, p.serverKeyFile: serverKey} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// certificate issues tmpl, valid for a day, with a new key, signed by
// parent (self-signed when parent is nil); it returns the certificate and
// its key, parsed and PEM-encoded.
func certificate(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// startPasswordEtcd starts an embedded etcd that serves https (no client
// certificates), prepares c1's user with a password and turns auth on, as
// `mcsd registry setup-auth --passwords --enable-auth` does; it returns the
// client URL and the user's name and password.
func startPasswordEtcd(t *testing.T, dir string, p *pki) (string, string, string) {
	t.Helper()
	url := startTLSEtcd(t, dir, p, false)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.caPEM)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	users, err := etcdregistry.SetupAuth(ctx, cli, etcdregistry.AuthOptions{
		ClusterSet: env.TB.ClusterSetID(), Clusters: []string{"c1"}, Passwords: true, EnableAuth: true, RootPassword: "root-secret",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if u.Cluster == "c1" {
			return url, u.Name, u.Password
		}
	}
	t.Fatalf("SetupAuth made no user for c1: %+v", users)
	return "", "", ""
}

// startTLSEtcd starts an embedded etcd that serves https, and with
// clientCerts requires client certificates signed by the CA; it returns its
// client URL.
func startTLSEtcd(t *testing.T, dir string, p *pki, clientCerts bool) string {
	t.Helper()
	cfg := embedded.Config{
		DataDir:         dir,
		ListenClientURL: "https://127.0.0.1:0",
		ListenPeerURL:   "http://127.0.0.1:0",
		CertFile:        p.serverCertFile,
		KeyFile:         p.serverKeyFile,
		UnsafeNoFsync:   true,
	}
	if clientCerts {
		cfg.TrustedCAFile = p.caFile
	}
	srv, err := embedded.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	readyCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.WaitReady(readyCtx); err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL()
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
