package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// container is one container of a pod, run as a host process.
type container struct {
	name    string
	image   string
	argv    []string // nil: it cannot run (reason, message)
	env     []string
	dir     string
	policy  corev1.RestartPolicy
	reason  string
	message string

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	running   bool
	startedAt time.Time
	restarts  int32
	last      *corev1.ContainerStateTerminated
	done      bool // ran to an end it is not restarted from
	stopped   bool

	oci       *ociContainer // an image container (oci.go): runs under runc
	probes    *probes       // nil: none (probes.go)
	retry     bool          // it could not be prepared for now: tried again (pods.go)
	startedOK bool          // its startup probe passed (or it has none)
	readyOK   bool          // its readiness probe passed last (or it has none)
}

func (a *Agent) newContainer(ctx context.Context, pod *corev1.Pod, sb *sandbox, spec corev1.Container) *container {
	c := &container{name: spec.Name, image: spec.Image, policy: pod.Spec.RestartPolicy, dir: sb.dir}
	img, err := a.findImage(spec.Image)
	if err != nil {
		c.reason, c.message = "ErrImageInspect", err.Error()
		return c
	}
	if img != nil {
		if sb.volumes == nil {
			if err := a.prepareVolumes(ctx, pod, sb); err != nil {
				sb.volumes = nil
				c.reason, c.message, c.retry = ReasonConfigError, err.Error(), true
				return c
			}
		}
		a.newImageContainer(ctx, pod, sb, spec, img, c)
		c.retry = c.argv == nil && c.reason == ReasonConfigError
		return c
	}
	if spec.WorkingDir != "" {
		if st, err := os.Stat(spec.WorkingDir); err == nil && st.IsDir() {
			c.dir = spec.WorkingDir
		}
	}
	env, vals, err := Env(pod, spec, sb.hostname)
	if err != nil {
		c.reason, c.message = ReasonConfigError, err.Error()
		return c
	}
	c.env = env
	c.argv, c.reason, c.message = a.progs.Resolve(spec, vals)
	c.probes = newProbes(spec)
	return c
}

// command returns a process that runs argv in the sandbox's namespaces: its
// network namespace (and its resolv.conf and hosts, which `ip netns exec`
// mounts over /etc), and a UTS namespace of its own holding the pod's host
// name. It dies with the agent.
func (a *Agent) command(sb *sandbox, env []string, dir string, argv []string) *exec.Cmd {
	// Absolute paths: the pod's environment (its PATH) is the wrappers' too.
	args := append([]string{"netns", "exec", sb.netns, a.unshare, "--uts", a.progs.Self, "pod-init", "-hostname", sb.hostname, "--"}, argv...)
	cmd := exec.Command("ip", args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// startContainer starts the container's process and watches it: when it
// exits it is restarted as the pod's restart policy says, with a growing
// delay, and the pod is queued so its status follows.
func (a *Agent) startContainer(sb *sandbox, c *container, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	var cmd *exec.Cmd
	if c.probes != nil {
		c.startedOK, c.readyOK = c.probes.startup == nil, c.probes.readiness == nil
	}
	if c.oci != nil {
		cmd = a.ociCommand(c)
	} else {
		cmd = a.command(sb, c.env, c.dir, c.argv)
	}
	logf, err := os.OpenFile(filepath.Join(sb.dir, c.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		if logf != nil {
			_ = logf.Close()
		}
		c.reason, c.message = "StartError", err.Error()
		a.queue.Add(key)
		return
	}
	c.cmd, c.running, c.startedAt, c.exited = cmd, true, started, make(chan struct{})
	exited := c.exited
	if c.probes != nil {
		go a.runProbes(sb, c, key, started, exited)
	}
	go func() {
		err := cmd.Wait()
		if logf != nil {
			_ = logf.Close()
		}
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				code = 128 + int(st.Signal())
			}
		}
		c.mu.Lock()
		c.running = false
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		c.last = &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason}
		c.last.StartedAt.Time, c.last.FinishedAt.Time = started, time.Now()
		restart := !c.stopped && (c.policy == corev1.RestartPolicyAlways || c.policy == "" ||
			(c.policy == corev1.RestartPolicyOnFailure && code != 0))
		c.done = !restart
		delay := time.Duration(0)
		if restart {
			delay = min(time.Second<<min(c.restarts, 4), 10*time.Second)
			c.restarts++
		}
		c.mu.Unlock()
		close(exited)
		a.queue.Add(key)
		if restart {
			time.AfterFunc(delay, func() { a.startContainer(sb, c, key) })
		}
	}()
}

// stop ends the container's process: TERM to its process group, KILL after
// grace, and no restart.
func (c *container) stop(grace time.Duration) {
	c.mu.Lock()
	c.stopped = true
	cmd, running, exited := c.cmd, c.running, c.exited
	c.mu.Unlock()
	if running {
		terminate(cmd, exited, grace)
	}
	if c.oci != nil {
		// runc killed with its container still running leaves it: kill and
		// remove it, and its root file system.
		c.oci.delete()
		_ = os.RemoveAll(filepath.Join(c.oci.bundle, "rootfs"))
	}
}

// terminate sends TERM to the process group of cmd, and KILL after grace,
// until exited closes.
func terminate(cmd *exec.Cmd, exited <-chan struct{}, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
}

// state returns the container's status as a kubelet reports it.
func (c *container) state() corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := corev1.ContainerStatus{Name: c.name, Image: c.image, RestartCount: c.restarts}
	started := c.running && (c.probes == nil || c.startedOK)
	s.Started = &started
	switch {
	case c.running:
		s.Ready = started && (c.probes == nil || c.readyOK)
		s.ContainerID = "testbed://" + c.name
		if c.oci != nil {
			s.ContainerID = "runc://" + c.oci.id
		}
		s.State.Running = &corev1.ContainerStateRunning{}
		s.State.Running.StartedAt.Time = c.startedAt
		if c.last != nil {
			s.LastTerminationState.Terminated = c.last.DeepCopy()
		}
	case c.argv == nil || c.reason == "StartError":
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.reason, Message: c.message}
	case c.done && c.last != nil:
		s.State.Terminated = c.last.DeepCopy()
	default:
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off restarting the container"}
		if c.last != nil {
			s.LastTerminationState.Terminated = c.last.DeepCopy()
		}
	}
	return s
}
