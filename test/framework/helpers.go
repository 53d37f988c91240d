package framework

import (
	"context"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/test/testbed"
)

// EnsureNamespace creates a namespace if it is missing.
func EnsureNamespace(t testing.TB, cl client.Client, name string) {
	t.Helper()
	err := cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// ServiceAccountToken mints a token, valid for an hour, for ServiceAccount
// ns/name of cluster c (TokenRequest API).
func ServiceAccountToken(t testing.TB, c *testbed.Cluster, ns, name string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s in %s: %v", ns, name, c.ID, err)
	}
	return tr.Status.Token
}

// App describes a Deployment and the Service in front of it.
type App struct {
	Namespace, Name string
	Replicas        int32
	Ports           []corev1.ServicePort // default: http 80 -> 8080
	Headless        bool
	StatefulSet     bool // pods get stable hostnames through the headless Service
	SessionAffinity corev1.ServiceAffinity
	// Containers run in each pod; default one that runs nothing real
	// (enough where kwok fakes pods; on the data plane it is not ready).
	Containers []corev1.Container
	// IPFamilyPolicy of the Service; default the API server's (SingleStack).
	IPFamilyPolicy corev1.IPFamilyPolicy
}

// Deploy creates the app's workload and Service in a cluster.
func Deploy(t testing.TB, cl client.Client, app App) {
	t.Helper()
	ctx := context.Background()
	EnsureNamespace(t, cl, app.Namespace)
	if app.Replicas == 0 {
		app.Replicas = 2
	}
	if len(app.Ports) == 0 {
		app.Ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
	}
	labels := map[string]string{"app": app.Name}
	var containerPorts []corev1.ContainerPort
	for _, p := range app.Ports {
		containerPorts = append(containerPorts, corev1.ContainerPort{Name: p.Name, ContainerPort: p.TargetPort.IntVal, Protocol: p.Protocol})
	}
	containers := app.Containers
	if len(containers) == 0 {
		containers = []corev1.Container{{Name: "app", Image: "example.invalid/app:1", Ports: containerPorts}}
	}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: containers},
	}
	var workload client.Object
	if app.StatefulSet {
		workload = &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: app.Name, Namespace: app.Namespace},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(app.Replicas), ServiceName: app.Name,
				Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
		}
	} else {
		workload = &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: app.Name, Namespace: app.Namespace},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(app.Replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
		}
	}
	if err := cl.Create(ctx, workload); err != nil {
		t.Fatalf("create workload %s/%s: %v", app.Namespace, app.Name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app.Name, Namespace: app.Namespace},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: app.Ports, SessionAffinity: app.SessionAffinity},
	}
	if app.IPFamilyPolicy != "" {
		svc.Spec.IPFamilyPolicy = &app.IPFamilyPolicy
	}
	if app.Headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	if err := cl.Create(ctx, svc); err != nil {
		t.Fatalf("create service %s/%s: %v", app.Namespace, app.Name, err)
	}
}

// Export creates a ServiceExport for a Service.
func Export(t testing.TB, cl client.Client, namespace, name string) {
	t.Helper()
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if err := cl.Create(context.Background(), se); err != nil {
		t.Fatalf("export %s/%s: %v", namespace, name, err)
	}
}

// Unexport deletes a ServiceExport.
func Unexport(t testing.TB, cl client.Client, namespace, name string) {
	t.Helper()
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if err := cl.Delete(context.Background(), se); err != nil {
		t.Fatalf("unexport %s/%s: %v", namespace, name, err)
	}
}

// GetImport returns the ServiceImport or nil if it does not exist.
func GetImport(t testing.TB, cl client.Client, namespace, name string) *mcsv1beta1.ServiceImport {
	t.Helper()
	return GetOrNil[mcsv1beta1.ServiceImport](t, cl, namespace, name)
}

// GetOrNil returns the object namespace/name of type T, or nil if it does
// not exist; any other error fails t.
func GetOrNil[T any, PT interface {
	*T
	client.Object
}](t testing.TB, cl client.Client, namespace, name string) PT {
	t.Helper()
	obj := PT(new(T))
	err := cl.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %T %s/%s: %v", obj, namespace, name, err)
	}
	return obj
}

// Condition returns a condition of a list by type, or nil.
func Condition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// CondString renders conditions for failure messages.
func CondString(conds []metav1.Condition) string {
	s := ""
	for _, c := range conds {
		s += fmt.Sprintf("[%s=%s %s: %s] ", c.Type, c.Status, c.Reason, c.Message)
	}
	return s
}

// Patch reads obj (by its namespace and name) from cl, applies change and
// writes the difference as a merge patch.
func Patch[T client.Object](t testing.TB, cl client.Client, obj T, change func(T)) {
	t.Helper()
	if err := cl.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("get %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
	base := obj.DeepCopyObject().(client.Object)
	change(obj)
	if err := cl.Patch(context.Background(), obj, client.MergeFrom(base)); err != nil {
		t.Fatalf("patch %T %s/%s: %v", obj, obj.GetNamespace(), obj.GetName(), err)
	}
}

// Scale sets a Deployment's replicas.
func Scale(t testing.TB, cl client.Client, ns, name string, replicas int32) {
	t.Helper()
	Patch(t, cl, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(replicas) })
}

// SetPodReady sets a pod's Ready and ContainersReady conditions, as a
// kubelet would when a readiness probe fails or passes again. Neither kwok
// nor the testbed's node agent overwrites them while the pod's containers
// stay as they are.
func SetPodReady(t testing.TB, cl client.Client, ns, name string, ready bool) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	base := pod.DeepCopy()
	SetReadyConditions(pod, ready)
	if err := cl.Status().Patch(context.Background(), pod, client.MergeFrom(base)); err != nil {
		t.Fatalf("set pod %s/%s ready=%v: %v", ns, name, ready, err)
	}
}

// SetReadyConditions sets, in pod's status, the Ready and ContainersReady
// conditions and every container's ready flag.
func SetReadyConditions(pod *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		c := corev1.PodCondition{Type: typ, Status: status, LastTransitionTime: metav1.Now()}
		if i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == typ }); i >= 0 {
			pod.Status.Conditions[i] = c
		} else {
			pod.Status.Conditions = append(pod.Status.Conditions, c)
		}
	}
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].Ready = ready
	}
}
