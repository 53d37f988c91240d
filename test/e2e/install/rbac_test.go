package install

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/imports"
	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

const timeout = 60 * time.Second

// Grants that the scenario cannot exercise, and why they are shipped anyway.
var notExercised = map[string]string{
	grant("", "events", "patch"): "an event that repeats is patched (its count), the scenario records none twice",
	grant("multicluster.x-k8s.io", "serviceimports/finalizers", "update"): "checked by the OwnerReferencesPermissionEnforcement admission plugin " +
		"when mcsd gives a derived Service or a headless import's EndpointSlice its ServiceImport as owner; the testbed does not enable it, and it is never a request",
	grant("", "services/finalizers", "update"): "checked by the OwnerReferencesPermissionEnforcement admission plugin " +
		"when mcsd creates an EndpointSlice owned by a derived Service; the testbed does not enable it, and it is never a request",
}

// mcsd running as the ServiceAccount that config/default ships, with
// exactly its RBAC, in two clusters: an export in c1 is imported in c2 (the
// derived Service's owner, taken away by hand, given back), then changed
// and withdrawn. Every request mcsd made is allowed by a shipped
// rule, and every shipped grant was used (but those in notExercised). With
// one grant less (EndpointSlices create) in c2, the import gets no
// EndpointSlices until the grant is back; without list and watch of
// Services, mcsd exits once its caches have not synced in time, and says
// why.
func TestShippedRBAC(t *testing.T) {
	fw.NeedEnv(t, env)
	ctx := context.Background()
	m := kustomize(t, repoPath(t, "config/default"))
	var rbac manifests
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		rbac = append(rbac, m.ofKind(kind)...)
	}
	sa := only[corev1.ServiceAccount](t, m)
	pol := policy{cluster: only[rbacv1.ClusterRole](t, m).Rules, namespace: sa.Namespace, namespaced: only[rbacv1.Role](t, m).Rules}

	configs := map[string]*rest.Config{}
	controllers := map[string]*controller{}
	for _, id := range []string{"c1", "c2"} {
		c := env.TB.Cluster(id)
		apply(t, ctx, adminClient(t, c), rbac)
		configs[id] = serviceAccountConfig(t, c, sa.Namespace, sa.Name)
		ctrl := startController(t, id, configs[id])
		t.Cleanup(ctrl.stop)
		controllers[id] = ctrl
	}
	// The ServiceAccount is no administrator.
	saClient, err := client.New(configs["c2"], client.Options{Scheme: manager.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := saClient.List(ctx, &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing Secrets as %s/%s: %v, want forbidden", sa.Namespace, sa.Name, err)
	}
	for _, ctrl := range controllers {
		ctrl.waitReady(t, 2*timeout)
	}

	c1, c2 := adminClient(t, env.TB.Cluster("c1")), adminClient(t, env.TB.Cluster("c2"))
	const ns = "install-rbac"
	fw.EnsureNamespace(t, c1, ns)
	fw.EnsureNamespace(t, c2, ns)
	fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	fw.Export(t, c1, ns, "web")

	// Exported from c1: finalizer and conditions written.
	poll.Until(t, timeout, "ServiceExport web Ready in c1", func() (bool, string) {
		se := &mcsv1beta1.ServiceExport{}
		if err := c1.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, se); err != nil {
			return false, err.Error()
		}
		r := fw.Condition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
		return r != nil && r.Status == metav1.ConditionTrue && len(se.Finalizers) > 0,
			fmt.Sprintf("finalizers %v, conditions %s", se.Finalizers, fw.CondString(se.Status.Conditions))
	})
	// Imported into c2: ServiceImport, derived Service with its IP, EndpointSlices.
	waitImported(t, c1, c2, ns, "web", 1, 2)

	// A hand edit takes the derived Service's owner away: mcsd gives it
	// back by a patch, since the copy it reads is its cache's (a Service
	// it has just created gets its owner by an update). The owner is
	// written after the import is whole: it is waited for first, so that
	// the edit takes it away rather than comes before it.
	derivedKey := client.ObjectKey{Namespace: ns, Name: imports.DerivedServiceName("web")}
	owned := func() (bool, string) {
		derived := &corev1.Service{}
		if err := c2.Get(ctx, derivedKey, derived); err != nil {
			return false, err.Error()
		}
		si := fw.GetImport(t, c2, ns, "web")
		return si != nil && metav1.IsControlledBy(derived, si), fmt.Sprintf("owners %+v", derived.OwnerReferences)
	}
	poll.Until(t, timeout, "derived Service owned by its ServiceImport in c2", owned)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		derived := &corev1.Service{}
		if err := c2.Get(ctx, derivedKey, derived); err != nil {
			return err
		}
		derived.OwnerReferences = nil
		return c2.Update(ctx, derived)
	}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, timeout, "derived Service owned by its ServiceImport again in c2", owned)

	// c2 exports the same Service too, then withdraws it: the import in c2
	// gains and loses a source cluster, which mcsd reports with Events (a
	// new import gets none).
	fw.Deploy(t, c2, fw.App{Namespace: ns, Name: "web", Replicas: 1})
	fw.Export(t, c2, ns, "web")
	poll.Until(t, timeout, "ClustersChanged Event on the import in c2", func() (bool, string) {
		var events corev1.EventList
		if err := c2.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "ServiceImport" && e.InvolvedObject.Name == "web" && e.Reason == "ClustersChanged" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Events, none ClustersChanged on ServiceImport web", len(events.Items))
	})
	fw.Unexport(t, c2, ns, "web")

	// Changes: a second port (the ServiceImport and derived Service are
	// updated), a third replica (the EndpointSlices are updated).
	svc := &corev1.Service{}
	if err := c1.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)})
	if err := c1.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	// One change at a time: had the import seen both at once, it would
	// create its new EndpointSlices with every endpoint, and update none.
	waitImported(t, c1, c2, ns, "web", 2, 2)
	dep := &appsv1.Deployment{}
	if err := c1.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, dep); err != nil {
		t.Fatal(err)
	}
	dep.Spec.Replicas = ptr.To[int32](3)
	if err := c1.Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	waitImported(t, c1, c2, ns, "web", 2, 3)

	// Withdrawn: everything mcsd made in c2 is deleted, the ServiceExport's
	// finalizer removed.
	fw.Unexport(t, c1, ns, "web")
	poll.Until(t, timeout, "import of web gone from c2", func() (bool, string) {
		if si := fw.GetImport(t, c2, ns, "web"); si != nil {
			return false, "ServiceImport still there"
		}
		err := c2.Get(ctx, client.ObjectKey{Namespace: ns, Name: imports.DerivedServiceName("web")}, &corev1.Service{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("derived Service: %v", err)
		}
		if n := len(importedSlices(t, c2, ns, "web")); n != 0 {
			return false, fmt.Sprintf("%d EndpointSlices left", n)
		}
		err = c1.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &mcsv1beta1.ServiceExport{})
		return apierrors.IsNotFound(err), fmt.Sprintf("ServiceExport in c1: %v", err)
	})

	// Every request was allowed, by a shipped rule; every shipped grant was used.
	used := map[string]bool{}
	for id, ctrl := range controllers {
		for _, r := range ctrl.requests.snapshot() {
			if r.Code == http.StatusForbidden {
				t.Errorf("%s: forbidden: %s", id, r)
			}
			if pol.rule(r) == nil {
				t.Errorf("%s: %s is allowed by no shipped rule", id, r)
				continue
			}
			res := r.Resource
			if r.Subresource != "" {
				res += "/" + r.Subresource
			}
			used[grant(r.Group, res, r.Verb)] = true
		}
	}
	for _, g := range pol.grants() {
		why, ok := notExercised[g]
		if watch, isList := strings.CutSuffix(g, " list"); isList && used[watch+" watch"] {
			ok, why = true, "client-go lists through a watch (WatchListClient) where the API server streams lists, as the testbed's does; it sends a LIST to one that does not"
		}
		switch {
		case used[g]:
		case ok:
			t.Logf("not exercised: %s: %s", g, why)
		default:
			t.Errorf("the shipped RBAC grants %q, which mcsd never used", g)
		}
	}
	usedList := slices.Sorted(maps.Keys(used))
	t.Logf("mcsd used: %s", strings.Join(usedList, "; "))
	if t.Failed() {
		t.FailNow()
	}

	t.Run("without EndpointSlices create", func(t *testing.T) {
		controllers["c2"].stop()
		shipped := only[rbacv1.ClusterRole](t, m)
		reduced := shipped.DeepCopy()
		for i, rule := range reduced.Rules {
			if slices.Contains(rule.Resources, "endpointslices") {
				reduced.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == "create" })
			}
		}
		applyClusterRole(t, c2, reduced)
		restored := false
		t.Cleanup(func() {
			if !restored {
				applyClusterRole(t, c2, shipped)
			}
		})
		ctrl := startController(t, "c2", configs["c2"])
		t.Cleanup(ctrl.stop)
		ctrl.waitReady(t, 2*timeout)

		fw.Deploy(t, c1, fw.App{Namespace: ns, Name: "web2", Replicas: 2})
		fw.Export(t, c1, ns, "web2")
		t.Cleanup(func() { fw.Unexport(t, c1, ns, "web2") })
		// The import happens, but its EndpointSlices are refused...
		poll.Until(t, timeout, "ServiceImport web2 in c2, EndpointSlices refused", func() (bool, string) {
			si := fw.GetImport(t, c2, ns, "web2")
			if si == nil || len(si.Spec.IPs) == 0 {
				return false, "no ServiceImport with an IP"
			}
			refused := slices.ContainsFunc(ctrl.requests.forbidden(), func(r apiRequest) bool {
				return r.Verb == "create" && r.Resource == "endpointslices" && r.Namespace == ns
			})
			return refused, "no EndpointSlice create refused yet"
		})
		// ...and never appear.
		poll.Throughout(t, 5*time.Second, "no EndpointSlices for web2 in c2", func() (bool, string) {
			n := len(importedSlices(t, c2, ns, "web2"))
			return n == 0, fmt.Sprintf("%d EndpointSlices", n)
		})
		for _, r := range ctrl.requests.forbidden() {
			if r.Verb != "create" || r.Resource != "endpointslices" {
				t.Errorf("forbidden: %s, want EndpointSlice creates only", r)
			}
		}

		// With the grant back, the same controller catches up.
		applyClusterRole(t, c2, shipped)
		restored = true
		waitImported(t, c1, c2, ns, "web2", 1, 2)
	})

	// Without list and watch of Services, mcsd exits and says why.
	t.Run("without Services watch", func(t *testing.T) {
		shipped := only[rbacv1.ClusterRole](t, m)
		applyClusterRole(t, c2, withoutVerbs(shipped, "", "services", "list", "watch"))
		t.Cleanup(func() { applyClusterRole(t, c2, shipped) })
		testMissingGrant(t, configs["c2"])
	})

	// With its Services list unanswered, mcsd exits and says which kind.
	t.Run("a Services list unanswered", func(t *testing.T) {
		testUnansweredList(t, configs["c2"])
	})
}

// waitImported waits until c2 imports Service ns/name of c1 in full: a
// ServiceImport with the Service's ports and one IP from c2's service range,
// the derived Service with that IP, and EndpointSlices with the addresses of
// c1's running pods, once c1 runs the given number of them (so that a
// scale-up is seen, not the state before it).
func waitImported(t *testing.T, c1, c2 client.Client, ns, name string, ports, pods int) {
	t.Helper()
	ctx := context.Background()
	poll.Until(t, timeout, fmt.Sprintf("import of %s in c2", name), func() (bool, string) {
		si := fw.GetImport(t, c2, ns, name)
		if si == nil {
			return false, "no ServiceImport"
		}
		if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.IPs) != 1 || len(si.Spec.Ports) != ports {
			return false, fmt.Sprintf("ServiceImport spec %+v", si.Spec)
		}
		svc := &corev1.Service{}
		if err := c2.Get(ctx, client.ObjectKey{Namespace: ns, Name: imports.DerivedServiceName(name)}, svc); err != nil {
			return false, fmt.Sprintf("derived Service: %v", err)
		}
		if svc.Spec.ClusterIP != si.Spec.IPs[0] || len(svc.Spec.Ports) != ports {
			return false, fmt.Sprintf("derived Service IP %s, %d ports; ServiceImport IP %s", svc.Spec.ClusterIP, len(svc.Spec.Ports), si.Spec.IPs[0])
		}
		want := fw.PodIPs(t, c1, ns, name)
		got := fw.ReadyAddresses(importedSlices(t, c2, ns, name))
		if len(want) != pods || !slices.Equal(got, want) {
			return false, fmt.Sprintf("EndpointSlices hold %v, c1's pods %v", got, want)
		}
		return true, ""
	})
	si := fw.GetImport(t, c2, ns, name)
	_, cidr, _ := net.ParseCIDR(env.TB.Cluster("c2").ServiceCIDRs[0])
	if !cidr.Contains(net.ParseIP(si.Spec.IPs[0])) {
		t.Errorf("import IP %s is outside c2's service range %s", si.Spec.IPs[0], cidr)
	}
}

// importedSlices returns the EndpointSlices mcsd made in a cluster for an import.
func importedSlices(t testing.TB, cl client.Client, ns, name string) []discoveryv1.EndpointSlice {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	if err := cl.List(context.Background(), &list, client.InNamespace(ns),
		client.MatchingLabels{mcsv1beta1.LabelServiceName: name, discoveryv1.LabelManagedBy: wellknown.ManagedBy}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// applyClusterRole applies a ClusterRole for real, in full.
func applyClusterRole(t testing.TB, cl client.Client, r *rbacv1.ClusterRole) {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind("ClusterRole"))
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	apply(t, context.Background(), cl, manifests{u})
}
