package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mcsd-io/mcsd/test/testbed/netns"
)

// Containers are probed as a kubelet probes them: the startup probe
// until it succeeds, then the readiness and liveness probes, each on its
// own period, timeout and thresholds. HTTP and TCP probes are sent from the
// node's network namespace to the pod's address (never from the host's);
// exec probes run in the container (a host program's in the pod's
// namespaces). A failed startup or liveness probe
// restarts the container; readiness decides the container's Ready.

// probes are a container's probes.
type probes struct {
	startup, readiness, liveness *corev1.Probe
	ports                        []corev1.ContainerPort
}

// newProbes returns the container's probes, nil when it has none.
func newProbes(spec corev1.Container) *probes {
	if spec.StartupProbe == nil && spec.ReadinessProbe == nil && spec.LivenessProbe == nil {
		return nil
	}
	return &probes{startup: spec.StartupProbe, readiness: spec.ReadinessProbe, liveness: spec.LivenessProbe, ports: spec.Ports}
}

// probeState is one probe's schedule and counts.
type probeState struct {
	p           *corev1.Probe
	next        time.Time
	fails, oks  int32
	kind        string
	lastMessage string
}

func newProbeState(kind string, p *corev1.Probe, started time.Time) *probeState {
	if p == nil {
		return nil
	}
	return &probeState{kind: kind, p: p, next: started.Add(time.Duration(p.InitialDelaySeconds) * time.Second)}
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

// runProbes probes c's process started at started until it exits.
func (a *Agent) runProbes(sb *sandbox, c *container, key string, started time.Time, exited <-chan struct{}) {
	pr := c.probes
	startup := newProbeState("startup", pr.startup, started)
	readiness := newProbeState("readiness", pr.readiness, started)
	liveness := newProbeState("liveness", pr.liveness, started)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			return
		case now := <-tick.C:
			if startup != nil {
				if ok, done := a.step(sb, c, startup, now); done {
					if !ok {
						a.restartContainer(c, "startup probe failed: "+startup.lastMessage)
						return
					}
					startup = nil
					a.setProbed(c, key, func() { c.startedOK = true })
				}
				continue
			}
			if readiness != nil {
				if ok, done := a.step(sb, c, readiness, now); done {
					a.setProbed(c, key, func() { c.readyOK = ok })
				}
			}
			if liveness != nil {
				if ok, done := a.step(sb, c, liveness, now); done && !ok {
					a.restartContainer(c, "liveness probe failed: "+liveness.lastMessage)
					return
				}
			}
		}
	}
}

// step runs the probe when it is due; done says its result crossed a
// threshold (ok: success).
func (a *Agent) step(sb *sandbox, c *container, s *probeState, now time.Time) (ok, done bool) {
	if now.Before(s.next) {
		return false, false
	}
	s.next = now.Add(time.Duration(orDefault(s.p.PeriodSeconds, 10)) * time.Second)
	err := a.probeOnce(sb, c, s.p)
	if err == nil {
		s.fails, s.oks = 0, s.oks+1
		return true, s.oks >= orDefault(s.p.SuccessThreshold, 1)
	}
	s.lastMessage = err.Error()
	s.oks, s.fails = 0, s.fails+1
	return false, s.fails >= orDefault(s.p.FailureThreshold, 3)
}

func (a *Agent) setProbed(c *container, key string, set func()) {
	c.mu.Lock()
	set()
	c.mu.Unlock()
	a.queue.Add(key)
}

// restartContainer stops the container's process (TERM, then KILL after
// the testbed's grace of 5 s); the restart policy starts it again.
func (a *Agent) restartContainer(c *container, why string) {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	a.log.Info("container restarted", "container", c.name, "reason", why)
	terminate(cmd, exited, 5*time.Second)
}

// probeOnce runs one probe.
func (a *Agent) probeOnce(sb *sandbox, c *container, p *corev1.Probe) error {
	timeout := time.Duration(orDefault(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	host := sb.ips[0]
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return netns.Dial(ctx, a.cfg.NodeNetns, network, addr)
	}
	switch {
	case p.HTTPGet != nil:
		port, err := probePort(p.HTTPGet.Port, c.probes.ports)
		if err != nil {
			return err
		}
		scheme := "http"
		if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		if p.HTTPGet.Host != "" {
			host = p.HTTPGet.Host
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), p.HTTPGet.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for _, h := range p.HTTPGet.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		tr := &http.Transport{DialContext: dial, DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // kubelets do not verify probe certificates
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := probePort(p.TCPSocket.Port, c.probes.ports)
		if err != nil {
			return err
		}
		conn, err := dial(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case p.Exec != nil && len(p.Exec.Command) > 0:
		var cmd *exec.Cmd
		if c.oci != nil {
			cmd = exec.CommandContext(ctx, a.cfg.Runc, append([]string{"--root", a.runcRoot(), "exec", c.oci.id}, p.Exec.Command...)...)
		} else {
			path, err := exec.LookPath(p.Exec.Command[0])
			if err != nil {
				return fmt.Errorf("exec probe: %w", err)
			}
			cmd = a.command(sb, c.env, c.dir, append([]string{path}, p.Exec.Command[1:]...))
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
		}
		cmd.WaitDelay = time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("exec probe: %w: %s", err, out)
		}
		return nil
	}
	return fmt.Errorf("probe %+v: the testbed runs HTTP, TCP and exec probes", p.ProbeHandler)
}

func probePort(p intstr.IntOrString, ports []corev1.ContainerPort) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	i := slices.IndexFunc(ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.StrVal })
	if i < 0 {
		return 0, fmt.Errorf("probe port %q is no port of the container", p.StrVal)
	}
	return int(ports[i].ContainerPort), nil
}
