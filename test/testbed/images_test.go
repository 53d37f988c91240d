package testbed_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// testImage is an image of agnhost alone (a static binary: no shell, no
// other program), as a distroless image would hold it.
const testImage = "testbed.example/agnhost-only:1"

// loadTestImage builds testImage and loads it as a Docker archive.
func loadTestImage(t *testing.T) {
	t.Helper()
	bin, err := os.ReadFile(tb.Binaries().Agnhost)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
		{Name: "agnhost", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(bin); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/agnhost"}, User: "1000:1000", Env: []string{"FROM_IMAGE=yes", "PATH=/"}})
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(testImage)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "agnhost-only.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.LoadImage(archive, ""); err != nil {
		t.Fatal(err)
	}
}

// A container whose image is in the store runs from it under runc, as a
// kubelet runs it: the image's entry point, user and environment; the
// pod's user, groups and fsGroup; envFrom and Secret keys; ConfigMap,
// Secret (with its mode), emptyDir and ServiceAccount token volumes; a
// read-only root file system; the in-cluster API server's variables; probes
// that decide readiness and restart it; removed with the pod.
func TestImageContainer(t *testing.T) {
	const ns = "images"
	loadTestImage(t)
	cl := clientFor(t, "c1")
	ctx := context.Background()
	_ = cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for _, obj := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"FROM_CONFIGMAP": "cm-value"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sec"}, Data: map[string][]byte{"key": []byte("secret-value")}},
	} {
		if err := cl.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/hostname", Port: intstr.FromString("http")}},
		PeriodSeconds: 1}
	createPod(t, "c1", ns, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "served"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](2000), RunAsGroup: ptr.To[int64](3000), FSGroup: ptr.To[int64](4000)},
			Containers: []corev1.Container{{
				Name: "web", Image: testImage, ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"netexec", "--http-port=8080"},
				Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				Env: []corev1.EnvVar{{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "key"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}, {Name: "sec", MountPath: "/sec"}, {Name: "scratch", MountPath: "/scratch"}},
				SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				ReadinessProbe: probe, LivenessProbe: probe, StartupProbe: probe,
			}},
			Volumes: []corev1.Volume{
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec", DefaultMode: ptr.To[int32](0o440)}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	})
	var pod *corev1.Pod
	poll.Until(t, time.Minute, "pod served ready", func() (bool, string) {
		p, c := readyCondition(t, "c1", ns, "served")
		pod = p
		return c != nil && c.Status == corev1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
	c := tb.Cluster("c1")
	id := pod.Status.ContainerStatuses[0].ContainerID
	pid, err := c.ContainerPID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	proc := func(rel string) string {
		b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), rel))
		if err != nil {
			t.Errorf("read %s of the container: %v", rel, err)
		}
		return string(b)
	}
	status := proc("status")
	for _, want := range []string{"Uid:\t2000\t2000\t2000\t2000", "Gid:\t3000\t3000\t3000\t3000", "Groups:\t4000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want) {
			t.Errorf("the process's status lacks %q:\n%s", want, status)
		}
	}
	environ := strings.Split(proc("environ"), "\x00")
	for _, want := range []string{"FROM_IMAGE=yes", "FROM_CONFIGMAP=cm-value", "FROM_SECRET=secret-value",
		"KUBERNETES_SERVICE_HOST=" + testbed.APIServiceIPs(c.Index)[0], "KUBERNETES_SERVICE_PORT=443", "HOSTNAME=served"} {
		if !contains(environ, want) {
			t.Errorf("the process's environment lacks %s: %q", want, environ)
		}
	}
	if got := proc("root/cfg/FROM_CONFIGMAP"); got != "cm-value" {
		t.Errorf("ConfigMap volume: %q", got)
	}
	if st, err := os.Stat(filepath.Join("/proc", fmt.Sprint(pid), "root/sec/key")); err != nil {
		t.Error(err)
	} else if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o440 || sys.Gid != 4000 {
		t.Errorf("Secret file: mode %v, group %d; want 0440 and the fsGroup 4000", st.Mode().Perm(), sys.Gid)
	}
	if tok := proc("root/var/run/secrets/kubernetes.io/serviceaccount/token"); len(tok) < 20 {
		t.Errorf("ServiceAccount token: %q", tok)
	}
	if err := os.WriteFile(filepath.Join("/proc", fmt.Sprint(pid), "root/scratch/x"), []byte("x"), 0o644); err != nil {
		t.Errorf("emptyDir is not writable: %v", err)
	}
	if err := os.WriteFile(filepath.Join("/proc", fmt.Sprint(pid), "root/x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to the read-only root file system: %v", err)
	}
	// kubectl exec runs in the container: the image has no cat.
	if _, stderr, err := c.Exec(ctx, ns, "served", "", nil, "cat", "/cfg/FROM_CONFIGMAP"); err == nil || !strings.Contains(stderr, "executable file not found") {
		t.Errorf("exec cat in an image without cat: %v: %s", err, stderr)
	}

	t.Run("a failing liveness probe restarts it, a failing readiness probe keeps it not ready", func(t *testing.T) {
		wrong := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9)}},
			PeriodSeconds: 1, FailureThreshold: 2}
		createPod(t, "c1", ns, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "failing"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "web", Image: testImage, Args: []string{"netexec", "--http-port=8080"},
				ReadinessProbe: wrong, LivenessProbe: wrong,
			}}},
		})
		poll.Until(t, time.Minute, "pod failing restarted by its liveness probe", func() (bool, string) {
			p, c := readyCondition(t, "c1", ns, "failing")
			if p == nil || c == nil || len(p.Status.ContainerStatuses) == 0 {
				return false, "no status yet"
			}
			if c.Status == corev1.ConditionTrue {
				t.Fatalf("pod failing turned ready with a failing readiness probe")
			}
			return p.Status.ContainerStatuses[0].RestartCount >= 1, fmt.Sprintf("restarts %d", p.Status.ContainerStatuses[0].RestartCount)
		})
	})

	// Deleted, its container goes with it.
	if err := cl.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "container of pod served removed", func() (bool, string) {
		_, err := c.ContainerPID(ctx, id)
		return err != nil, fmt.Sprintf("runc state: %v", err)
	})
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
