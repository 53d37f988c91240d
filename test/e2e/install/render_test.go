package install

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// kustomizations are the directories an operator applies with kubectl apply -k.
var kustomizations = []string{"config/default", "config/overlays/etcd", "config/overlays/etcd-password", "config/overlays/cloudmap"}

// Every kustomization renders the whole install into mcsd-system, with the
// Deployment as hardened as the issue asks.
func TestKustomizationsRender(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			m := kustomize(t, repoPath(t, dir))
			kinds := map[string]int{}
			for _, u := range m {
				kinds[u.GetKind()]++
				switch u.GetKind() {
				case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace":
				default:
					if u.GetNamespace() != "mcsd-system" {
						t.Errorf("%s %s is in namespace %q, want mcsd-system", u.GetKind(), u.GetName(), u.GetNamespace())
					}
				}
			}
			want := map[string]int{"Namespace": 1, "CustomResourceDefinition": 3, "ServiceAccount": 1, "ClusterRole": 1,
				"ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "ConfigMap": 1, "Deployment": 1}
			if diff := cmp.Diff(want, kinds); diff != "" {
				t.Errorf("kinds (-want +have):\n%s", diff)
			}
			checkDeployment(t, only[appsv1.Deployment](t, m), only[corev1.ConfigMap](t, m).Name)
		})
	}
}

// checkDeployment checks what every rendering of the Deployment must have.
func checkDeployment(t *testing.T, d *appsv1.Deployment, configMap string) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != "mcsd:dev" {
		t.Errorf("image %q, want the placeholder mcsd:dev", c.Image)
	}
	for _, arg := range []string{"--registry=$(MCSD_REGISTRY)", "--leader-elect", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %q lack %s", c.Args, arg)
		}
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != configMap {
		t.Errorf("envFrom %+v, want ConfigMap %s", c.EnvFrom, configMap)
	}
	podNS := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAMESPACE" })
	if podNS < 0 || c.Env[podNS].ValueFrom == nil || c.Env[podNS].ValueFrom.FieldRef == nil || c.Env[podNS].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("env %+v: want POD_NAMESPACE from metadata.namespace", c.Env)
	}
	health := intstr.FromString("health")
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		path := "/healthz"
		if name == "readiness" {
			path = "/readyz"
		}
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port != health {
			t.Errorf("%s probe %+v, want GET %s on port health", name, p, path)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if diff := cmp.Diff(map[string]int32{"metrics": 8080, "health": 8081}, ports); diff != "" {
		t.Errorf("ports (-want +have):\n%s", diff)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
	}
	psc, sc := spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot:
		t.Error("pod: runAsNonRoot is not true")
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("pod: seccomp profile is not RuntimeDefault")
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("container: readOnlyRootFilesystem is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("container: allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("container: capabilities are not drop ALL")
	}
	if spec.ServiceAccountName == "" {
		t.Error("no serviceAccountName")
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate (the new pod would wait for the old one's lease)", d.Spec.Strategy.Type)
	}
}

// The overlays set what their registry needs: etcd the TLS files from the
// Secret, Cloud Map the region and the IRSA annotation.
func TestOverlaysConfigureTheRegistry(t *testing.T) {
	t.Run("etcd", func(t *testing.T) {
		m := kustomize(t, repoPath(t, "config/overlays/etcd"))
		if got := only[corev1.ConfigMap](t, m).Data; !strings.HasPrefix(got["MCSD_REGISTRY"], "etcds://") {
			t.Errorf("registry %q, want etcds://", got["MCSD_REGISTRY"])
		}
		spec := only[appsv1.Deployment](t, m).Spec.Template.Spec
		c := spec.Containers[0]
		for _, arg := range []string{"--registry-ca=/etc/mcsd/registry/ca.crt", "--registry-cert=/etc/mcsd/registry/tls.crt", "--registry-key=/etc/mcsd/registry/tls.key"} {
			if !slices.Contains(c.Args, arg) {
				t.Errorf("args %q lack %s", c.Args, arg)
			}
		}
		if len(spec.Volumes) != 1 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != "mcsd-registry-etcd" {
			t.Errorf("volumes %+v, want Secret mcsd-registry-etcd", spec.Volumes)
		}
		if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/mcsd/registry" || !c.VolumeMounts[0].ReadOnly {
			t.Errorf("volume mounts %+v, want /etc/mcsd/registry read-only", c.VolumeMounts)
		}
	})
	t.Run("etcd-password", func(t *testing.T) {
		m := kustomize(t, repoPath(t, "config/overlays/etcd-password"))
		if got := only[corev1.ConfigMap](t, m).Data; !strings.HasPrefix(got["MCSD_REGISTRY"], "etcds://") {
			t.Errorf("registry %q, want etcds://", got["MCSD_REGISTRY"])
		}
		c := only[appsv1.Deployment](t, m).Spec.Template.Spec.Containers[0]
		checkPasswordAuth(t, c, "mcsd-registry-etcd-auth")
	})
	t.Run("cloudmap", func(t *testing.T) {
		m := kustomize(t, repoPath(t, "config/overlays/cloudmap"))
		if diff := cmp.Diff(map[string]string{"MCSD_REGISTRY": "cloudmap://", "AWS_REGION": "eu-west-1"}, only[corev1.ConfigMap](t, m).Data); diff != "" {
			t.Errorf("registry settings (-want +have):\n%s", diff)
		}
		if got := only[corev1.ServiceAccount](t, m).Annotations["eks.amazonaws.com/role-arn"]; got == "" {
			t.Error("ServiceAccount has no eks.amazonaws.com/role-arn annotation")
		}
		if v := only[appsv1.Deployment](t, m).Spec.Template.Spec.Volumes; len(v) != 0 {
			t.Errorf("volumes %+v, want none", v)
		}
	})
}

// checkPasswordAuth checks a container set up for etcd password
// authentication: the CA file and no client certificate in the args, the
// user name and password from Secret secret.
func checkPasswordAuth(t *testing.T, c corev1.Container, secret string) {
	t.Helper()
	if !slices.Contains(c.Args, "--registry-ca=/etc/mcsd/registry/ca.crt") {
		t.Errorf("args %q lack --registry-ca", c.Args)
	}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--registry-cert") || strings.HasPrefix(a, "--registry-key") {
			t.Errorf("args %q present a client certificate", c.Args)
		}
	}
	for name, key := range map[string]string{"MCSD_REGISTRY_USERNAME": "username", "MCSD_REGISTRY_PASSWORD": "password"} {
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil ||
			c.Env[i].ValueFrom.SecretKeyRef.Name != secret || c.Env[i].ValueFrom.SecretKeyRef.Key != key {
			t.Errorf("env %+v: want %s from key %s of Secret %s", c.Env, name, key, secret)
		}
	}
}

// The image is set the kustomize way, from an overlay of one's own.
func TestKustomizeSetsTheImage(t *testing.T) {
	dir := t.TempDir()
	// kustomize takes other kustomizations by relative path only.
	base, err := filepath.Rel(dir, repoPath(t, "config/overlays/etcd"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := "resources:\n- " + base + "\n" +
		"images:\n- name: mcsd\n  newName: registry.example/mcsd\n  newTag: v1.2.3\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	d := only[appsv1.Deployment](t, kustomize(t, dir))
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "registry.example/mcsd:v1.2.3" {
		t.Errorf("image %q, want registry.example/mcsd:v1.2.3", got)
	}
}

// helm lint is clean for both registries, and the chart refuses values that
// cannot work.
func TestHelmLint(t *testing.T) {
	for name, values := range map[string][]string{"etcd": helmEtcd, "etcd-password": helmEtcdPassword, "cloudmap": helmCloudMap} {
		out, err := helm(t, append([]string{"lint", "--strict", "charts/mcsd"}, values...)...)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if bytes.Contains(out, []byte("[WARNING]")) || bytes.Contains(out, []byte("[ERROR]")) {
			t.Errorf("%s: helm lint:\n%s", name, out)
		}
	}
	for name, values := range map[string][]string{
		"unknown registry":           {"--set", "registry.type=consul"},
		"cloudmap without region":    {"--set", "registry.type=cloudmap"},
		"etcd without endpoints":     {"--set", "registry.etcd.endpoints=null"},
		"tls without secret":         {"--set", "registry.etcd.tls.secretName="},
		"existing SA without a name": {"--set", "serviceAccount.create=false"},
	} {
		if _, err := helm(t, append([]string{"template", "mcsd", "charts/mcsd"}, values...)...); err == nil {
			t.Errorf("%s: helm template accepted it", name)
		}
	}
}

// The chart passes --lease-ttl only when registry.leaseTTL is set: mcsd's
// backends then keep their own defaults (etcd 30s, Cloud Map 60s).
func TestHelmLeaseTTL(t *testing.T) {
	for _, c := range []struct {
		values []string
		want   []string
	}{
		{helmCloudMap, nil},
		{append(slices.Clone(helmEtcd), "--set", "registry.leaseTTL=45s"), []string{"--lease-ttl=45s"}},
	} {
		args := only[appsv1.Deployment](t, helmTemplate(t, c.values...)).Spec.Template.Spec.Containers[0].Args
		got := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return !strings.HasPrefix(a, "--lease-ttl") })
		if !slices.Equal(got, c.want) {
			t.Errorf("values %v: lease TTL args %v, want %v", c.values, got, c.want)
		}
	}
}

// The chart installs what the kustomize overlays install: the same CRDs,
// RBAC rules, registry settings and Deployment.
func TestHelmChartMatchesKustomize(t *testing.T) {
	for name, c := range map[string]struct {
		overlay string
		values  []string
	}{
		"etcd":          {"config/overlays/etcd", helmEtcd},
		"etcd-password": {"config/overlays/etcd-password", helmEtcdPassword},
		"cloudmap":      {"config/overlays/cloudmap", helmCloudMap},
	} {
		t.Run(name, func(t *testing.T) {
			k := kustomize(t, repoPath(t, c.overlay))
			h := helmTemplate(t, c.values...)

			var kinds []string
			for _, u := range h {
				kinds = append(kinds, u.GetKind())
			}
			var kKinds []string
			for _, u := range k {
				kKinds = append(kKinds, u.GetKind())
			}
			// The release's namespace is helm's to create (--create-namespace).
			kKinds = slices.DeleteFunc(kKinds, func(s string) bool { return s == "Namespace" })
			slices.Sort(kinds)
			slices.Sort(kKinds)
			if diff := cmp.Diff(kKinds, kinds); diff != "" {
				t.Errorf("kinds (-kustomize +helm):\n%s", diff)
			}

			for _, crd := range k.ofKind("CustomResourceDefinition") {
				i := slices.IndexFunc(h, func(u2 *unstructured.Unstructured) bool { return u2.GetName() == crd.GetName() })
				if i < 0 {
					t.Errorf("chart lacks CRD %s", crd.GetName())
					continue
				}
				hc := h[i].DeepCopy()
				kc := crd.DeepCopy()
				// kustomize adds the part-of label to everything, the chart
				// its own labels; the chart keeps its CRDs on uninstall.
				kc.SetLabels(nil)
				hc.SetLabels(nil)
				if got := hc.GetAnnotations()["helm.sh/resource-policy"]; got != "keep" {
					t.Errorf("chart's CRD %s: helm.sh/resource-policy %q, want keep", crd.GetName(), got)
				}
				unstructured.RemoveNestedField(hc.Object, "metadata", "annotations", "helm.sh/resource-policy")
				if len(hc.GetAnnotations()) == 0 {
					unstructured.RemoveNestedField(hc.Object, "metadata", "annotations")
				}
				if diff := cmp.Diff(kc.Object, hc.Object); diff != "" {
					t.Errorf("CRD %s (-kustomize +helm):\n%s", crd.GetName(), diff)
				}
			}
			if diff := cmp.Diff(only[rbacv1.ClusterRole](t, k).Rules, only[rbacv1.ClusterRole](t, h).Rules); diff != "" {
				t.Errorf("ClusterRole rules (-kustomize +helm):\n%s", diff)
			}
			if diff := cmp.Diff(only[rbacv1.Role](t, k).Rules, only[rbacv1.Role](t, h).Rules); diff != "" {
				t.Errorf("Role rules (-kustomize +helm):\n%s", diff)
			}
			if diff := cmp.Diff(only[corev1.ConfigMap](t, k).Data, only[corev1.ConfigMap](t, h).Data); diff != "" {
				t.Errorf("registry settings (-kustomize +helm):\n%s", diff)
			}
			if diff := cmp.Diff(only[corev1.ServiceAccount](t, k).Annotations, only[corev1.ServiceAccount](t, h).Annotations); diff != "" {
				t.Errorf("ServiceAccount annotations (-kustomize +helm):\n%s", diff)
			}

			hd := only[appsv1.Deployment](t, h)
			checkDeployment(t, hd, only[corev1.ConfigMap](t, h).Name)
			kd := only[appsv1.Deployment](t, k)
			kp, hp := kd.Spec.Template.Spec, hd.Spec.Template.Spec
			kc, hc := kp.Containers[0], hp.Containers[0]
			for what, pair := range map[string][2]any{
				"args":                  {kc.Args, hc.Args},
				"env":                   {kc.Env, hc.Env},
				"ports":                 {kc.Ports, hc.Ports},
				"probes":                {[]any{kc.StartupProbe, kc.LivenessProbe, kc.ReadinessProbe}, []any{hc.StartupProbe, hc.LivenessProbe, hc.ReadinessProbe}},
				"resources":             {kc.Resources, hc.Resources},
				"securityContext":       {kc.SecurityContext, hc.SecurityContext},
				"volumeMounts":          {kc.VolumeMounts, hc.VolumeMounts},
				"imagePullPolicy":       {kc.ImagePullPolicy, hc.ImagePullPolicy},
				"pod securityContext":   {kp.SecurityContext, hp.SecurityContext},
				"volumes":               {kp.Volumes, hp.Volumes},
				"nodeSelector":          {kp.NodeSelector, hp.NodeSelector},
				"replicas and strategy": {[]any{kd.Spec.Replicas, kd.Spec.Strategy}, []any{hd.Spec.Replicas, hd.Spec.Strategy}},
			} {
				if diff := cmp.Diff(pair[0], pair[1]); diff != "" {
					t.Errorf("Deployment %s (-kustomize +helm):\n%s", what, diff)
				}
			}
		})
	}
}

// The chart's files/crds (which templates/crds.yaml renders) are
// config/crd/bases, byte for byte (make manifests copies them).
func TestChartCRDsAreConfigCRDs(t *testing.T) {
	bases, err := filepath.Glob(repoPath(t, "config/crd/bases/*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	chart, err := filepath.Glob(repoPath(t, "charts/mcsd/files/crds/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(chart) != len(bases) {
		t.Errorf("charts/mcsd/files/crds has %d files, config/crd/bases %d: run make manifests", len(chart), len(bases))
	}
	for _, b := range bases {
		want, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(repoPath(t, filepath.Join("charts/mcsd/files/crds", filepath.Base(b))))
		if err != nil || !bytes.Equal(want, have) {
			t.Errorf("charts/mcsd/files/crds/%s differs from config/crd/bases: run make manifests", filepath.Base(b))
		}
	}
}
