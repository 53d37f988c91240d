package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/mcsd-io/mcsd/test/testbed/agent"
	"github.com/mcsd-io/mcsd/test/testbed/images"
)

// ImageStore is the directory of the testbed's image store (package
// images): pods whose image is there run it under runc.
func (tb *Testbed) ImageStore() string { return filepath.Join(tb.dir, "images") }

// LoadImage loads the images of an archive (a Docker archive, an OCI layout
// or a tar of one) into the testbed's image store, as `kind load
// image-archive` does; ref names an OCI layout's image or overrides a
// Docker archive's tags. It returns the references loaded. Pods started
// after it run the image.
func (tb *Testbed) LoadImage(path, ref string) ([]string, error) {
	s, err := images.Open(tb.ImageStore())
	if err != nil {
		return nil, err
	}
	return s.Load(path, ref)
}

// ExposeHost makes a TCP server on the host's loopback (hostAddr) reachable
// from the cluster's pods at the returned address, a port of node 0's IPv4
// address: a listener in the node's network namespace relays every
// connection through a Unix socket to hostAddr, as the agent relays the
// API server. Nothing is sent from the host to the pods' network: the
// host side only dials hostAddr. It stops when ctx ends.
func (c *Cluster) ExposeHost(ctx context.Context, hostAddr string) (string, error) {
	if !c.tb.dataPlane() {
		return "", errors.New("the testbed has no data plane")
	}
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	dir := c.socketDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("relay directory: %w", err)
	}
	sock := filepath.Join(dir, "host-"+strconv.Itoa(port)+".sock")
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return "", fmt.Errorf("relay socket: %w", err)
	}
	go agent.Forward(l, func() (net.Conn, error) { return net.Dial("tcp", hostAddr) })
	addr := net.JoinHostPort(NodeIPs(c.Index, 0)[0], strconv.Itoa(port))
	relay := exec.Command("ip", "netns", "exec", c.NodeNetns(), c.tb.agentBinary(), "relay", "-listen", addr, "-to", sock)
	relay.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := relay.Start(); err != nil {
		_ = l.Close()
		return "", fmt.Errorf("start relay: %w", err)
	}
	go func() {
		<-ctx.Done()
		_ = relay.Process.Kill()
		_ = relay.Wait()
		_ = l.Close()
		_ = os.Remove(sock)
	}()
	return addr, nil
}

// ContainerPID returns the host process id of an image container's first
// process, by the ID its pod's status reports (runc://ID).
func (c *Cluster) ContainerPID(ctx context.Context, containerID string) (int, error) {
	id, ok := strings.CutPrefix(containerID, "runc://")
	if !ok {
		return 0, fmt.Errorf("container %q does not run from an image", containerID)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return 0, err
	}
	root := agent.RuncRoot(c.socketDir())
	out, err := exec.CommandContext(ctx, runc, "--root", root, "state", id).Output()
	if err != nil {
		return 0, fmt.Errorf("runc state %s: %w", id, err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid == 0 {
		return 0, fmt.Errorf("runc state %s: no process (%s)", id, out)
	}
	return st.Pid, nil
}
