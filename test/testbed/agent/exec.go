package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	remotecommandserver "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The streaming server answers the API server's exec requests, as a
// kubelet's does: /exec/{namespace}/{pod}/{container}?command=...  Only
// the API server gets in: its client certificate (the cluster's admin
// certificate, which the testbed configures as its kubelet client
// certificate) must be signed by the cluster's CA.
func (a *Agent) startExecServer(ctx context.Context) error {
	caPEM, err := os.ReadFile(a.cfg.ClientCA)
	if err != nil {
		return fmt.Errorf("read client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("client CA %s holds no certificate", a.cfg.ClientCA)
	}
	cert, err := selfSigned()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", a.cfg.ExecAddr)
	if err != nil {
		return fmt.Errorf("streaming server: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/", a.serveExec)
	mux.HandleFunc("/containerLogs/", a.serveLogs)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
			MinVersion:   tls.VersionTLS12,
		},
	}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error(err, "streaming server stopped")
		}
	}()
	return nil
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("streaming server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "testbed-kubelet"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("streaming server certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func (a *Agent) serveExec(w http.ResponseWriter, req *http.Request) {
	// /exec/{namespace}/{pod}/{container} or /exec/{namespace}/{pod}/{uid}/{container}
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/exec/"), "/")
	if len(parts) != 3 && len(parts) != 4 {
		http.Error(w, "want /exec/{namespace}/{pod}/{container}", http.StatusNotFound)
		return
	}
	ns, pod, container := parts[0], parts[1], parts[len(parts)-1]
	opts, err := remotecommandserver.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := req.URL.Query()["command"]
	remotecommandserver.ServeExec(w, req, a, ns+"/"+pod, "", container, cmd, opts,
		4*time.Hour, 30*time.Second, remotecommandconsts.SupportedStreamingProtocols)
}

var _ remotecommandserver.Executor = (*Agent)(nil)

// ExecInContainer runs cmd in the pod's namespaces with the container's
// environment. A terminal is not allocated: with tty, the command's output
// comes back as it writes it.
func (a *Agent) ExecInContainer(ctx context.Context, name string, _ types.UID, containerName string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	ns, pod, _ := strings.Cut(name, "/")
	sb := a.sandboxFor(ns, pod)
	if sb == nil {
		return fmt.Errorf("pod %s is not running on this testbed's nodes", name)
	}
	sb.mu.Lock()
	stopping := sb.stopping
	if !stopping {
		sb.execs.Add(1)
	}
	var c *container
	for _, cc := range sb.containers {
		if cc.name == containerName {
			c = cc
		}
	}
	sb.mu.Unlock()
	if stopping {
		return fmt.Errorf("pod %s is stopping", name)
	}
	defer sb.execs.Done()
	if c == nil {
		return fmt.Errorf("pod %s has no container %q", name, containerName)
	}
	if len(cmd) == 0 {
		return errors.New("no command")
	}
	var p *exec.Cmd
	if c.oci != nil {
		// In the container, with its file system, user and environment: a
		// command its image does not hold fails as it would in a cluster.
		p = exec.Command(a.cfg.Runc, append([]string{"--root", a.runcRoot(), "exec", c.oci.id}, cmd...)...)
		p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	} else {
		path, err := exec.LookPath(cmd[0])
		if err != nil {
			return utilexec.CodeExitError{Err: fmt.Errorf("%q is not installed on this machine: %w", cmd[0], err), Code: 127}
		}
		env := c.env
		if env == nil {
			env = []string{"PATH=" + defaultPath, "HOSTNAME=" + sb.hostname}
		}
		p = a.command(sb, env, c.dir, append([]string{path}, cmd[1:]...))
	}
	p.Stdin, p.Stdout = in, out
	if errOut != nil {
		p.Stderr = errOut
	}
	// A command's children (a server started with &) may hold its output
	// open: once it exits, give them a moment, then stop waiting for them.
	p.WaitDelay = 2 * time.Second
	if err := p.Start(); err != nil {
		return fmt.Errorf("exec in %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			if p.Process != nil {
				_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL) // its process group
			}
		case <-done:
		}
	}()
	err := p.Wait()
	close(done)
	if errors.Is(err, exec.ErrWaitDelay) && p.ProcessState != nil {
		// The command ended; only what it left running held the output.
		if code := p.ProcessState.ExitCode(); code != 0 {
			return utilexec.CodeExitError{Err: err, Code: code}
		}
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return utilexec.CodeExitError{Err: err, Code: ee.ExitCode()}
	}
	return err
}
