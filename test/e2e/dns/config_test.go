package dns

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// What config/coredns ships works with stock CoreDNS: the cluster DNS
// manifests of config/samples/coredns with the component applied, put in c3;
// their Corefile, run with a token of the coredns ServiceAccount (so with the
// rendered ClusterRole's permissions only), answers clusterset.local.
func TestShippedConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ns, name = "dns-config", "web"
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	c3 := env.TB.Cluster("c3")
	kubectl := env.TB.Binaries().Kubectl
	rendered, err := exec.Command(kubectl, "kustomize", filepath.Join(root, "config", "samples", "coredns")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/samples/coredns: %v", err)
	}
	apply := exec.Command(kubectl, "--kubeconfig", env.TB.Kubeconfig, "--context", "c3", "apply", "-f", "-")
	apply.Stdin = bytes.NewReader(rendered)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("apply the rendered CoreDNS manifests to c3: %v: %s", err, out)
	}

	// The rendered ConfigMap carries the shipped Corefile.
	shipped, err := os.ReadFile(filepath.Join(root, "config", "coredns", "Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client(t, "c3").Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["Corefile"] != string(shipped) {
		t.Fatalf("ConfigMap kube-system/coredns has Corefile\n%s\nwant config/coredns/Corefile\n%s", cm.Data["Corefile"], shipped)
	}

	kubeconfig := serviceAccountKubeconfig(t, c3, "kube-system", "coredns")

	fw.EnsureNamespace(t, env.Client(t, "c1"), ns)
	fw.EnsureNamespace(t, env.Client(t, "c3"), ns)
	fw.Deploy(t, env.Client(t, "c1"), fw.App{Namespace: ns, Name: name, Replicas: 1})
	fw.Export(t, env.Client(t, "c1"), ns, name)

	d, err := c3.StartCoreDNSWith(ctx, testbed.CoreDNSOptions{
		Kubeconfig: kubeconfig,
		Context:    "coredns",
		Corefile:   localCorefile(t, cm.Data["Corefile"]),
	})
	if err != nil {
		t.Fatalf("run the shipped Corefile as kube-system/coredns: %v", err)
	}
	defer func() { _ = d.Close() }()

	var ip string
	poll.Until(t, timeout, "import in c3", func() (bool, string) {
		si := fw.GetImport(t, env.Client(t, "c3"), ns, name)
		if si == nil || len(si.Spec.IPs) == 0 {
			return false, fmt.Sprintf("%+v", si)
		}
		ip = si.Spec.IPs[0]
		return true, ""
	})
	svcName := clusterSetName(ns, name)
	poll.Until(t, timeout, svcName+" from the shipped Corefile", func() (bool, string) {
		m, err := testbed.Query(ctx, d.Addr(), svcName, dns.TypeA)
		if err != nil {
			return false, err.Error()
		}
		return len(m.Answer) == 1 && m.Answer[0].(*dns.A).A.String() == ip, m.String()
	})
	// A missing clusterset.local name is NXDOMAIN, not forwarded upstream.
	m, err := testbed.Query(ctx, d.Addr(), clusterSetName(ns, "missing"), dns.TypeA)
	if err != nil || m.Rcode != dns.RcodeNameError {
		t.Errorf("missing name: %v %v", err, m)
	}
	fw.Unexport(t, env.Client(t, "c1"), ns, name)
}

// localCorefile adapts a cluster Corefile to run outside the cluster: on
// the testbed's addresses instead of :53, :8080, :8181 and :9153, and
// reading the cluster through a kubeconfig instead of in-cluster config.
// Everything else runs as shipped.
func localCorefile(t *testing.T, corefile string) func(addr, readyAddr, kubeconfig, kubeContext string) string {
	t.Helper()
	ports := make([]int, 2)
	for i := range ports {
		p, err := testbed.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	return func(addr, readyAddr, kubeconfig, kubeContext string) string {
		host, port, _ := strings.Cut(addr, ":")
		out := corefile
		for _, r := range []struct{ old, new string }{
			{".:53 {", fmt.Sprintf(".:%s {\n    bind %s", port, host)},
			{"health {", fmt.Sprintf("health %s:%d {", host, ports[0])},
			{"    ready\n", fmt.Sprintf("    ready %s\n", readyAddr)},
			{"prometheus :9153", fmt.Sprintf("prometheus %s:%d", host, ports[1])},
			{"ip6.arpa {\n", fmt.Sprintf("ip6.arpa {\n        kubeconfig %s %s\n", kubeconfig, kubeContext)},
		} {
			if strings.Count(out, r.old) != 1 {
				t.Errorf("shipped Corefile: want %q exactly once", r.old)
			}
			out = strings.Replace(out, r.old, r.new, 1)
		}
		return out
	}
}

// serviceAccountKubeconfig writes a kubeconfig (context "coredns") that
// reaches the cluster with a token of a ServiceAccount.
func serviceAccountKubeconfig(t *testing.T, c *testbed.Cluster, ns, sa string) string {
	t.Helper()
	token := fw.ServiceAccountToken(t, c, ns, sa)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[c.ID] = &clientcmdapi.Cluster{
		Server:                   c.Config.Host,
		CertificateAuthority:     c.Config.CAFile,
		CertificateAuthorityData: c.Config.CAData,
		InsecureSkipTLSVerify:    c.Config.Insecure,
	}
	cfg.AuthInfos["coredns"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["coredns"] = &clientcmdapi.Context{Cluster: c.ID, AuthInfo: "coredns"}
	cfg.CurrentContext = "coredns"
	path := filepath.Join(t.TempDir(), "coredns-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
