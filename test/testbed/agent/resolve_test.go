package agent

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestResolve(t *testing.T) {
	look := func(name string) (string, error) {
		switch name {
		case "socat", "busybox", "sh", "zsh", "bash", "curl", "nslookup":
			return "/usr/bin/" + name, nil
		case "/bin/sh":
			return name, nil
		}
		return "", errors.New("not found")
	}
	p := Programs{Agnhost: "/cache/agnhost", Self: "/tb/testbed", LookPath: look}
	env := map[string]string{"PORT": "8080"}
	cases := []struct {
		name   string
		c      corev1.Container
		argv   []string
		reason string
	}{
		{"command runs the host program", corev1.Container{Image: "whatever:1", Command: []string{"socat"}, Args: []string{"TCP-LISTEN:$(PORT)", "$$(PORT)"}},
			[]string{"/usr/bin/socat", "TCP-LISTEN:8080", "$(PORT)"}, ""},
		{"missing program", corev1.Container{Image: "x", Command: []string{"nginx"}}, nil, ReasonCommandNotFound},
		{"agnhost image", corev1.Container{Image: "registry.k8s.io/e2e-test-images/agnhost:2.53", Args: []string{"netexec", "--http-port=$(PORT)"}},
			[]string{"/cache/agnhost", "netexec", "--http-port=8080"}, ""},
		{"pause image by digest", corev1.Container{Image: "registry.k8s.io/pause@sha256:abc"}, []string{"/tb/testbed", "pause"}, ""},
		{"busybox without args is its shell", corev1.Container{Image: "busybox"}, []string{"/usr/bin/busybox", "sh"}, ""},
		{"busybox runs its args as applets", corev1.Container{Image: "docker.io/library/busybox:1.36", Args: []string{"/bin/sh", "-c", "true"}},
			[]string{"/usr/bin/busybox", "/bin/sh", "-c", "true"}, ""},
		{"netshoot runs its args", corev1.Container{Image: "nicolaka/netshoot:v0.15", Args: []string{"/bin/sh", "-ec", "sleep 5"}},
			[]string{"/bin/sh", "-ec", "sleep 5"}, ""},
		{"netshoot by digest from docker.io", corev1.Container{Image: "docker.io/nicolaka/netshoot@sha256:0123", Args: []string{"nslookup", "x"}},
			[]string{"/usr/bin/nslookup", "x"}, ""},
		{"netshoot without args runs its CMD", corev1.Container{Image: "index.docker.io/nicolaka/netshoot"}, []string{"/usr/bin/zsh"}, ""},
		{"alpine without args is its shell", corev1.Container{Image: "alpine:3.20"}, []string{"/bin/sh"}, ""},
		{"debian with args", corev1.Container{Image: "debian:bookworm", Args: []string{"bash", "-c", "echo $(PORT)"}},
			[]string{"/usr/bin/bash", "-c", "echo 8080"}, ""},
		{"ubuntu without args", corev1.Container{Image: "docker.io/library/ubuntu:24.04"}, []string{"/usr/bin/bash"}, ""},
		{"curl image puts its entry point before the args", corev1.Container{Image: "curlimages/curl:8.10.1", Args: []string{"-s", "http://web"}},
			[]string{"/usr/bin/curl", "-s", "http://web"}, ""},
		{"curl image with a command as args, as its entry point script runs it", corev1.Container{Image: "curlimages/curl", Args: []string{"sh", "-c", "curl -s x"}},
			[]string{"/usr/bin/sh", "-c", "curl -s x"}, ""},
		{"socat image", corev1.Container{Image: "docker.io/alpine/socat:1.7.4.4@sha256:ab", Args: []string{"TCP-LISTEN:$(PORT)", "STDOUT"}},
			[]string{"/usr/bin/socat", "TCP-LISTEN:8080", "STDOUT"}, ""},
		{"a program the image's args name must be installed", corev1.Container{Image: "alpine", Args: []string{"apk", "add", "x"}}, nil, ReasonCommandNotFound},
		{"registry port is not a tag", corev1.Container{Image: "localhost:5000/app"}, nil, ReasonImageNotRunnable},
		{"a look-alike of a known image", corev1.Container{Image: "example.com/alpine:3"}, nil, ReasonImageNotRunnable},
		{"unknown image", corev1.Container{Image: "nginx:1.27"}, nil, ReasonImageNotRunnable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			argv, reason, msg := p.Resolve(tc.c, env)
			if !slices.Equal(argv, tc.argv) || reason != tc.reason {
				t.Fatalf("Resolve = %q, %q (%s); want %q, %q", argv, reason, msg, tc.argv, tc.reason)
			}
			if reason != "" && msg == "" {
				t.Fatal("a reason without a message")
			}
			if reason == ReasonImageNotRunnable && !strings.Contains(msg, tc.c.Image) {
				t.Fatalf("message %q does not name the image %q", msg, tc.c.Image)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"$(A)-$(B)": "1-two", "$$(A)": "$(A)", "$(C)": "$(C)", "$(A": "$(A", "a$b": "a$b", "": "", "$": "$",
	} {
		if got := Expand(in, env); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo"},
		Status:     corev1.PodStatus{PodIP: "10.1.0.2", PodIPs: []corev1.PodIP{{IP: "10.1.0.2"}, {IP: "fd00:10:1::2"}}},
	}
	c := corev1.Container{Env: []corev1.EnvVar{
		{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "IPS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}},
		{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "GREETING", Value: "hello from $(NAME)"},
	}}
	env, vals, err := Env(pod, c, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"IP": "10.1.0.2", "IPS": "10.1.0.2,fd00:10:1::2", "NAME": "web-1", "NS": "demo", "GREETING": "hello from web-1", "HOSTNAME": "web-1"}
	for k, v := range want {
		if vals[k] != v {
			t.Errorf("%s = %q, want %q", k, vals[k], v)
		}
	}
	if !slices.Contains(env, "GREETING=hello from web-1") {
		t.Errorf("env %q lacks GREETING", env)
	}
	c.Env = []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
	if _, _, err := Env(pod, c, "web-1"); err == nil {
		t.Error("a secret reference: no error")
	}
}

func TestIPAM(t *testing.T) {
	m := newIPAM()
	cidrs := []string{"10.1.0.0/24", "fd00:10:1:0::/64"}
	m.use("old", []string{"10.1.0.2", "fd00:10:1::2"})
	a, err := m.allocate("a", cidrs)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, []string{"10.1.0.3", "fd00:10:1::3"}) {
		t.Fatalf("allocate = %v", a)
	}
	m.release("old")
	b, _ := m.allocate("b", cidrs)
	if !slices.Equal(b, []string{"10.1.0.2", "fd00:10:1::2"}) {
		t.Fatalf("after release, allocate = %v", b)
	}
	for range 252 { // host numbers 2..254, two taken
		if _, err = m.allocate("x", cidrs); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatal("a full range: no error")
	}
}

func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"}, {"a\nb\nc", 1, "c"}, {"a\nb\n", 5, "a\nb\n"}, {"a\n", 0, ""}, {"", 3, ""},
	} {
		if got := string(lastLines([]byte(tc.in), tc.n)); got != tc.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
