package agent

import (
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Programs are the host programs that containers without a command of their
// own run, by image.
type Programs struct {
	// Agnhost is Kubernetes' e2e test server (registry.k8s.io/e2e-test-images/agnhost).
	Agnhost string
	// Self is this binary, whose `pause` command is the pause image's.
	Self string
	// LookPath finds a host program by name; default exec.LookPath.
	LookPath func(string) (string, error)
}

// Reasons a container cannot run, as its waiting state says.
const (
	ReasonImageNotRunnable = "ImageNotRunnable"
	ReasonCommandNotFound  = "CommandNotFound"
	ReasonConfigError      = "CreateContainerConfigError"
)

// imageBase is an image reference without its tag or digest, and without the
// Docker Hub prefixes that name the same repository ("docker.io/",
// "index.docker.io/", "library/").
func imageBase(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	// A colon after the last slash starts the tag (one before it is a port).
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	for _, p := range []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/"} {
		image = strings.TrimPrefix(image, p)
	}
	return strings.TrimPrefix(image, "library/")
}

// entryPoint is how an image starts a container that has no command of its
// own, as its image configuration says: Kubernetes runs the image's
// ENTRYPOINT followed by the container's args, or, with no args, followed by
// the image's CMD.
type entryPoint struct {
	// entrypoint is the image's ENTRYPOINT: a host program name. Empty for
	// images without one, whose containers run their args (or cmd) as the
	// command line.
	entrypoint string
	// cmd is the image's CMD, used when the container has no args.
	cmd []string
	// multiCall runs every command line through this host program (busybox:
	// every command of the image is one of its applets).
	multiCall string
	// argsMayBeCommand is the entry point script of images such as
	// curlimages/curl: args whose first word is an option or no program
	// go to the entry point's program; otherwise they are the command line.
	argsMayBeCommand bool
}

// knownEntryPoints is the table of images whose entry points the testbed knows, by
// repository (imageBase). Whatever program a row names must be on the host:
// hack/ensure-host-tools.sh installs them.
var knownEntryPoints = map[string]entryPoint{
	// Images with no ENTRYPOINT: the container's args are its command line.
	"nicolaka/netshoot": {cmd: []string{"zsh"}},
	"alpine":            {cmd: []string{"/bin/sh"}},
	"debian":            {cmd: []string{"bash"}},
	"ubuntu":            {cmd: []string{"bash"}},
	"busybox":           {cmd: []string{"sh"}, multiCall: "busybox"},
	"registry.k8s.io/e2e-test-images/busybox": {cmd: []string{"sh"}, multiCall: "busybox"},
	// Images whose ENTRYPOINT is one program.
	"curlimages/curl": {entrypoint: "curl", argsMayBeCommand: true},
	"alpine/socat":    {entrypoint: "socat"},
}

// knownImages lists the images the testbed can run without a command, for
// messages.
func knownImages() string {
	names := append([]string{"registry.k8s.io/e2e-test-images/agnhost", "registry.k8s.io/pause"}, slices.Sorted(maps.Keys(knownEntryPoints))...)
	return strings.Join(names, ", ")
}

// Resolve returns the host command line that runs the container, or the
// reason and a message why the testbed cannot run it. Images are not pulled:
// a container with a command runs that host program (found on PATH) with its
// args; one without runs as Kubernetes would run it from its image's
// configuration (ENTRYPOINT, then args or CMD), for the images of the table
// above and agnhost and pause.
func (p Programs) Resolve(c corev1.Container, env map[string]string) (argv []string, reason, message string) {
	look := p.LookPath
	if look == nil {
		look = exec.LookPath
	}
	command, args := expandAll(c.Command, env), expandAll(c.Args, env)
	if len(command) > 0 {
		return p.hostProgram(look, command, args)
	}
	base := imageBase(c.Image)
	switch base {
	case "registry.k8s.io/e2e-test-images/agnhost", "k8s.gcr.io/e2e-test-images/agnhost":
		return append([]string{p.Agnhost}, args...), "", ""
	case "registry.k8s.io/pause", "k8s.gcr.io/pause":
		return []string{p.Self, "pause"}, "", ""
	}
	ep, ok := knownEntryPoints[base]
	if !ok {
		return nil, ReasonImageNotRunnable, fmt.Sprintf("the testbed does not pull images and has no entry point for image %q "+
			"(it knows %s); give the container a command", c.Image, knownImages())
	}
	if len(args) == 0 {
		args = ep.cmd
	}
	line := args
	argsAreCommand := ep.argsMayBeCommand && len(args) > 0 && !strings.HasPrefix(args[0], "-") && isProgram(look, args[0])
	if ep.entrypoint != "" && !argsAreCommand {
		line = append([]string{ep.entrypoint}, args...)
	}
	if ep.multiCall != "" {
		line = append([]string{ep.multiCall}, line...)
	}
	if len(line) == 0 {
		return nil, ReasonImageNotRunnable, fmt.Sprintf("image %q has no entry point and the container no args", c.Image)
	}
	return p.hostProgram(look, line[:1], line[1:])
}

// isProgram reports whether name is a program look finds.
func isProgram(look func(string) (string, error), name string) bool {
	_, err := look(name)
	return err == nil
}

// hostProgram finds command[0] on the host and returns the whole command line.
func (p Programs) hostProgram(look func(string) (string, error), command, args []string) (argv []string, reason, message string) {
	path, err := look(command[0])
	if err != nil {
		return nil, ReasonCommandNotFound, fmt.Sprintf("the testbed runs a container's command as a host program, and %q is not installed on this machine "+
			"(hack/ensure-host-tools.sh installs the programs of the images it knows)", command[0])
	}
	return append([]string{path}, append(slices.Clone(command[1:]), args...)...), "", ""
}

func expandAll(in []string, env map[string]string) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = Expand(s, env)
	}
	return out
}

// Expand replaces $(NAME) with the value of NAME in env, as Kubernetes does
// in a container's command, args and env values: $$ is a literal $, and a
// reference to a name env does not hold stays as it is.
func Expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// defaultPath is a container's PATH unless it sets its own.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env returns the container's environment: the defaults every container
// gets, then its own variables in order, literal values (with $(NAME)
// references to earlier ones expanded) and the downward API fields below.
// An unsupported source is an error naming it.
func Env(pod *corev1.Pod, c corev1.Container, hostname string) ([]string, map[string]string, error) {
	return buildEnv(pod, c, [][2]string{{"PATH", defaultPath}, {"HOME", "/root"}, {"HOSTNAME", hostname}}, nil)
}

// envSource reads the ConfigMaps and Secrets that envFrom and valueFrom
// name, in the pod's namespace.
type envSource interface {
	configMap(name string) (map[string]string, error)
	secret(name string) (map[string]string, error)
}

// buildEnv is Env from base (name, value pairs, in order), reading the
// ConfigMaps and Secrets that envFrom and valueFrom name from src (nil:
// such a reference is an error).
func buildEnv(pod *corev1.Pod, c corev1.Container, base [][2]string, src envSource) ([]string, map[string]string, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, kv := range base {
		set(kv[0], kv[1])
	}
	for _, ef := range c.EnvFrom {
		data, optional, err := fromSource(src, ef)
		if err != nil && !optional {
			return nil, nil, fmt.Errorf("envFrom: %w", err)
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			set(ef.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, Expand(e.Value, vals))
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			set(e.Name, v)
		case src != nil && (e.ValueFrom.ConfigMapKeyRef != nil || e.ValueFrom.SecretKeyRef != nil):
			v, ok, err := keyValue(src, e.ValueFrom)
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			if ok {
				set(e.Name, v)
			}
		default:
			return nil, nil, fmt.Errorf("env %s: the testbed supports literal values and fieldRef only (ConfigMap and Secret keys in image containers)", e.Name)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, vals, nil
}

// fromSource reads an envFrom source; optional says a missing one is no
// error.
func fromSource(src envSource, ef corev1.EnvFromSource) (map[string]string, bool, error) {
	if src == nil {
		return nil, false, errors.New("the testbed reads ConfigMaps and Secrets for image containers only")
	}
	switch {
	case ef.ConfigMapRef != nil:
		d, err := src.configMap(ef.ConfigMapRef.Name)
		return d, ptr.Deref(ef.ConfigMapRef.Optional, false), err
	case ef.SecretRef != nil:
		d, err := src.secret(ef.SecretRef.Name)
		return d, ptr.Deref(ef.SecretRef.Optional, false), err
	}
	return nil, false, errors.New("neither a ConfigMap nor a Secret")
}

// keyValue reads one key of a ConfigMap or Secret; false when an optional
// one is missing.
func keyValue(src envSource, from *corev1.EnvVarSource) (string, bool, error) {
	var (
		data     map[string]string
		err      error
		key      string
		optional bool
	)
	if r := from.ConfigMapKeyRef; r != nil {
		data, err = src.configMap(r.Name)
		key, optional = r.Key, ptr.Deref(r.Optional, false)
	} else {
		r := from.SecretKeyRef
		data, err = src.secret(r.Name)
		key, optional = r.Key, ptr.Deref(r.Optional, false)
	}
	if err != nil {
		return "", false, errOrOptional(err, optional)
	}
	v, ok := data[key]
	if !ok {
		return "", false, errOrOptional(fmt.Errorf("no key %q", key), optional)
	}
	return v, true, nil
}

func errOrOptional(err error, optional bool) error {
	if optional {
		return nil
	}
	return err
}

func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		return joinIPs(pod.Status.PodIPs), nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.hostIPs":
		ips := make([]string, 0, len(pod.Status.HostIPs))
		for _, ip := range pod.Status.HostIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	}
	return "", fmt.Errorf("fieldRef %q is not one the testbed supports", path)
}

func joinIPs(ips []corev1.PodIP) string {
	s := make([]string, 0, len(ips))
	for _, ip := range ips {
		s = append(s, ip.IP)
	}
	return strings.Join(s, ",")
}
