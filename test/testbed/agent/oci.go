package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcsd-io/mcsd/test/testbed/images"
	"github.com/mcsd-io/mcsd/test/testbed/netns"
)

// A container whose image is in the testbed's image store runs from that
// image under runc, as a container runtime runs it for a kubelet: the
// image's layers as its root file system, its entry point and the
// container's command and args, the image's environment and the
// container's, its securityContext (user, groups, read-only root file
// system, capabilities, no privilege escalation), its volumes, in the pod's
// network namespace and its own mount, PID, IPC and UTS namespaces.

// ociContainer is how the agent runs one image container.
type ociContainer struct {
	id     string // runc's container id
	bundle string // config.json and rootfs
	runc   string // runc's path
	root   string // runc's state directory
}

// delete removes the container's runc state, killing what still runs in it.
func (o *ociContainer) delete() {
	_ = exec.Command(o.runc, "--root", o.root, "delete", "--force", o.id).Run()
}

// runtimeDefaultCaps are the capabilities a container runtime grants by
// default (containerd's and CRI-O's list).
var runtimeDefaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// findImage returns the stored image a container names, or nil.
func (a *Agent) findImage(ref string) (v1.Image, error) {
	if a.images == nil {
		return nil, nil
	}
	img, ok, err := a.images.Find(ref)
	if err != nil || !ok {
		return nil, err
	}
	return img, nil
}

// newImageContainer prepares c to run from img: its bundle (root file
// system and runtime configuration) under the pod's directory. What the pod
// asks that cannot be done leaves it waiting with the reason, as a kubelet
// reports it.
func (a *Agent) newImageContainer(ctx context.Context, pod *corev1.Pod, sb *sandbox, spec corev1.Container, img v1.Image, c *container) {
	if spec.ImagePullPolicy == corev1.PullAlways {
		c.reason, c.message = "ErrImagePull", fmt.Sprintf("image %q has pull policy Always; the testbed never pulls: use IfNotPresent or Never", spec.Image)
		return
	}
	if a.cfg.Runc == "" {
		c.reason, c.message = ReasonImageNotRunnable, "image "+spec.Image+" is loaded, but the testbed has no OCI runtime (runc): run hack/ensure-host-tools.sh"
		return
	}
	cf, err := img.ConfigFile()
	if err != nil {
		c.reason, c.message = "ErrImageInspect", err.Error()
		return
	}
	oc, err := a.bundle(ctx, pod, sb, spec, cf.Config, img)
	if err != nil {
		c.reason, c.message = ReasonConfigError, err.Error()
		return
	}
	c.oci = oc
	c.argv = []string{a.cfg.Runc, "--root", a.runcRoot(), "run", "--bundle", oc.bundle, oc.id}
	c.probes = newProbes(spec)
}

func (a *Agent) runcRoot() string { return RuncRoot(a.cfg.SocketDir) }

// bundle writes the container's OCI bundle.
func (a *Agent) bundle(ctx context.Context, pod *corev1.Pod, sb *sandbox, spec corev1.Container, ic v1.Config, img v1.Image) (*ociContainer, error) {
	user, err := containerUser(pod, spec, ic)
	if err != nil {
		return nil, err
	}
	env, vals, err := a.imageEnv(ctx, pod, spec, ic, sb.hostname)
	if err != nil {
		return nil, err
	}
	args := processArgs(spec, ic, vals)
	if len(args) == 0 {
		return nil, fmt.Errorf("image %s has no entry point and the container no command", spec.Image)
	}
	cwd := spec.WorkingDir
	if cwd == "" {
		cwd = ic.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	mounts, err := a.containerMounts(sb, spec)
	if err != nil {
		return nil, err
	}
	oc := &ociContainer{
		id:     fmt.Sprintf("%s-%s-%s", a.cfg.Cluster, string(sb.uid)[:8], spec.Name),
		bundle: filepath.Join(sb.dir, spec.Name+".oci"),
		runc:   a.cfg.Runc,
		root:   a.runcRoot(),
	}
	rootfs := filepath.Join(oc.bundle, "rootfs")
	_ = os.RemoveAll(oc.bundle)
	if err := images.Unpack(img, rootfs); err != nil {
		return nil, fmt.Errorf("image %s: %w", spec.Image, err)
	}
	if err := os.WriteFile(filepath.Join(oc.bundle, "hostname"), []byte(sb.hostname+"\n"), 0o644); err != nil {
		return nil, err
	}
	mounts = append(mounts, specs.Mount{Destination: "/etc/hostname", Type: "bind", Source: filepath.Join(oc.bundle, "hostname"), Options: []string{"rbind", "ro"}})
	s := runtimeSpec(sb, spec, pod, user, env, args, cwd, mounts)
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("runtime configuration: %w", err)
	}
	if err := os.WriteFile(filepath.Join(oc.bundle, "config.json"), data, 0o600); err != nil {
		return nil, fmt.Errorf("runtime configuration: %w", err)
	}
	return oc, nil
}

// containerUser is the process's user: the securityContext's (container
// over pod), else the image's USER (numeric); with runAsNonRoot, root is
// refused as a kubelet refuses it.
func containerUser(pod *corev1.Pod, spec corev1.Container, ic v1.Config) (specs.User, error) {
	var u specs.User
	imageUID, imageGID, hasGID, err := parseImageUser(ic.User)
	if err != nil {
		return u, err
	}
	u.UID, u.GID = imageUID, imageGID
	psc, csc := pod.Spec.SecurityContext, spec.SecurityContext
	var nonRoot *bool
	if psc != nil {
		if psc.RunAsUser != nil {
			u.UID = uint32(*psc.RunAsUser)
		}
		if psc.RunAsGroup != nil {
			u.GID, hasGID = uint32(*psc.RunAsGroup), true
		}
		nonRoot = psc.RunAsNonRoot
		if psc.FSGroup != nil {
			u.AdditionalGids = append(u.AdditionalGids, uint32(*psc.FSGroup))
		}
		for _, g := range psc.SupplementalGroups {
			u.AdditionalGids = append(u.AdditionalGids, uint32(g))
		}
	}
	if csc != nil {
		if csc.RunAsUser != nil {
			u.UID = uint32(*csc.RunAsUser)
		}
		if csc.RunAsGroup != nil {
			u.GID, hasGID = uint32(*csc.RunAsGroup), true
		}
		if csc.RunAsNonRoot != nil {
			nonRoot = csc.RunAsNonRoot
		}
	}
	if !hasGID && ic.User == "" {
		u.GID = 0
	}
	if nonRoot != nil && *nonRoot && u.UID == 0 {
		return u, fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, spec.Name)
	}
	return u, nil
}

// parseImageUser reads an image's USER: "uid" or "uid:gid" (names would
// need the image's /etc/passwd, which the testbed does not read).
func parseImageUser(s string) (uid, gid uint32, hasGID bool, err error) {
	if s == "" {
		return 0, 0, false, nil
	}
	us, gs, hasGID := strings.Cut(s, ":")
	u, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return 0, 0, false, fmt.Errorf("image user %q is not numeric; the testbed runs numeric users only (set runAsUser)", s)
	}
	if !hasGID {
		return uint32(u), uint32(u), false, nil
	}
	g, err := strconv.ParseUint(gs, 10, 32)
	if err != nil {
		return 0, 0, false, fmt.Errorf("image group %q is not numeric; set runAsGroup", gs)
	}
	return uint32(u), uint32(g), true, nil
}

// processArgs is the command line as Kubernetes makes it from the image and
// the container: the container's command replaces the image's ENTRYPOINT
// (and its CMD); its args replace CMD. $(VAR) references are expanded.
func processArgs(spec corev1.Container, ic v1.Config, env map[string]string) []string {
	command, args := expandAll(spec.Command, env), expandAll(spec.Args, env)
	if len(command) == 0 {
		command = ic.Entrypoint
		if len(args) == 0 {
			args = ic.Cmd
		}
	}
	return append(slices.Clone(command), args...)
}

// imageEnv is the process's environment: the image's, then what the
// kubelet adds (HOSTNAME, the API server's Service variables), then the
// container's envFrom and env.
func (a *Agent) imageEnv(ctx context.Context, pod *corev1.Pod, spec corev1.Container, ic v1.Config, hostname string) ([]string, map[string]string, error) {
	var base [][2]string
	for _, kv := range ic.Env {
		k, v, _ := strings.Cut(kv, "=")
		base = append(base, [2]string{k, v})
	}
	if !slices.ContainsFunc(base, func(kv [2]string) bool { return kv[0] == "PATH" }) {
		base = append(base, [2]string{"PATH", defaultPath})
	}
	base = append(base, [2]string{"HOSTNAME", hostname})
	svc, err := a.cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err == nil && svc.Spec.ClusterIP != "" && len(svc.Spec.Ports) > 0 {
		host, port := svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port))
		url := "tcp://" + net.JoinHostPort(host, port)
		base = append(base,
			[2]string{"KUBERNETES_SERVICE_HOST", host}, [2]string{"KUBERNETES_SERVICE_PORT", port},
			[2]string{"KUBERNETES_SERVICE_PORT_HTTPS", port}, [2]string{"KUBERNETES_PORT", url},
			[2]string{"KUBERNETES_PORT_" + port + "_TCP", url}, [2]string{"KUBERNETES_PORT_" + port + "_TCP_PROTO", "tcp"},
			[2]string{"KUBERNETES_PORT_" + port + "_TCP_PORT", port}, [2]string{"KUBERNETES_PORT_" + port + "_TCP_ADDR", host})
	}
	return buildEnv(pod, spec, base, apiSource{ctx: ctx, a: a, namespace: pod.Namespace})
}

// runtimeSpec is the container's OCI runtime configuration.
func runtimeSpec(sb *sandbox, spec corev1.Container, pod *corev1.Pod, user specs.User, env, args []string, cwd string, mounts []specs.Mount) *specs.Spec {
	csc := spec.SecurityContext
	caps := slices.Clone(runtimeDefaultCaps)
	readOnly, noNewPrivs := false, false
	if csc != nil {
		if csc.Capabilities != nil {
			for _, d := range csc.Capabilities.Drop {
				if strings.EqualFold(string(d), "ALL") {
					caps = nil
					break
				}
				caps = slices.DeleteFunc(caps, func(c string) bool { return c == capName(d) })
			}
			for _, ad := range csc.Capabilities.Add {
				if !slices.Contains(caps, capName(ad)) {
					caps = append(caps, capName(ad))
				}
			}
		}
		readOnly = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
		noNewPrivs = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
	}
	effective := caps
	if user.UID != 0 {
		effective = nil // a non-root process holds none; the bounding set still limits what it could gain
	}
	std := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/etc/resolv.conf", Type: "bind", Source: filepath.Join(netns.EtcDir, sb.netns, "resolv.conf"), Options: []string{"rbind", "ro"}},
		{Destination: "/etc/hosts", Type: "bind", Source: filepath.Join(netns.EtcDir, sb.netns, "hosts"), Options: []string{"rbind", "ro"}},
	}
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: sb.hostname,
		Root:     &specs.Root{Path: "rootfs", Readonly: readOnly},
		Process: &specs.Process{
			User: user, Args: args, Env: env, Cwd: cwd, NoNewPrivileges: noNewPrivs,
			Capabilities: &specs.LinuxCapabilities{Bounding: caps, Permitted: effective, Effective: effective},
		},
		Mounts: append(std, mounts...),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: filepath.Join(netns.Dir, sb.netns)},
			},
			CgroupsPath: "/" + sb.netns + "-" + spec.Name,
			Resources:   &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}},
			MaskedPaths: []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
				"/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
		Annotations: map[string]string{"io.kubernetes.pod.namespace": pod.Namespace, "io.kubernetes.pod.name": pod.Name,
			"io.kubernetes.container.name": spec.Name},
	}
}

func capName(c corev1.Capability) string {
	s := strings.ToUpper(string(c))
	if !strings.HasPrefix(s, "CAP_") {
		s = "CAP_" + s
	}
	return s
}

// ociCommand is the runc process that runs the container in the
// foreground; runc passes the signals it gets on to the container.
func (a *Agent) ociCommand(c *container) *exec.Cmd {
	c.oci.delete() // what a crashed run left under the same id
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = []string{"PATH=" + defaultPath}
	cmd.Dir = c.oci.bundle
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// RuncCleanup removes every container that runc, under state directory
// root, knows: those an earlier run of an agent left. runc is runc's path
// (empty: nothing to do).
func RuncCleanup(runc, root string) {
	if runc == "" {
		return
	}
	out, err := exec.Command(runc, "--root", root, "list", "-q").Output()
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		(&ociContainer{id: id, runc: runc, root: root}).delete()
	}
}

// RuncRoot is runc's state directory for an agent whose SocketDir is dir.
func RuncRoot(socketDir string) string { return filepath.Join(socketDir, "runc") }
