package mototest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Region is the region tests use against moto.
const Region = "us-east-1"

// Credentials are the static credentials moto accepts.
var Credentials aws.CredentialsProvider = credentials.NewStaticCredentialsProvider("testing", "testing", "")

// Server is a running moto server, or a view of one in an account of its
// own (InAccount).
type Server struct {
	// URL is the endpoint, "http://127.0.0.1:<port>".
	URL    string
	cmd    *exec.Cmd
	out    *bytes.Buffer
	exited chan struct{}
	// proxy, for a view in an account, is what URL names.
	proxy *httptest.Server
}

// accountHeader names, in a request to moto, the AWS account it acts in
// (moto's default account, 123456789012, when absent).
const accountHeader = "x-moto-account-id"

// InAccount returns a view of s in AWS account account (12 digits): its
// URL is a proxy of s that makes every request act in that account, whose
// Cloud Map namespaces, services and operations moto keeps apart from every
// other account's (unless moto runs with MOTO_ACCOUNT_ID set, which moto
// puts before the header). Stop stops the proxy alone; Reset of a view
// clears every account.
func (s *Server) InAccount(account string) *Server {
	target, err := url.Parse(s.URL)
	if err != nil {
		panic(fmt.Sprintf("moto's own URL %q: %v", s.URL, err))
	}
	// The backends under test poll: keep their connections to moto open
	// (http.DefaultTransport keeps 2 idle per host).
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	proxy := httptest.NewServer(&httputil.ReverseProxy{Transport: transport, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Header.Set(accountHeader, account)
	}})
	return &Server{URL: proxy.URL, proxy: proxy}
}

// Start starts a server that is stopped when t ends. It fails t when
// python3 is missing (a prerequisite of mcsd's tests) or moto cannot be
// installed or started. env adds to the server's environment ("NAME=value";
// hack/moto/cloudmap_server.py reads MCSD_MOTO_INSTANCES_PER_SERVICE).
func Start(t testing.TB, env ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("the Cloud Map tests need python3 on PATH to run moto: ", err)
	}
	s, err := Run(context.Background(), env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Run installs moto if needed and starts a server, with env added to its
// environment (see Start); Stop stops it.
func Run(ctx context.Context, env ...string) (*Server, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	python, err := ensureVenv(ctx, root)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		s, err := start(ctx, python, filepath.Join(root, "hack", "moto", "cloudmap_server.py"), env)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// ensureVenv runs hack/moto/ensure-venv.sh and returns the venv's python.
func ensureVenv(ctx context.Context, root string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "moto", "ensure-venv.sh"))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/moto/ensure-venv.sh: %w\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	server := lines[len(lines)-1]
	return filepath.Join(filepath.Dir(server), "python"), nil
}

func start(ctx context.Context, python, script string, env []string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	out := &bytes.Buffer{}
	cmd := exec.Command(python, script, "-H", "127.0.0.1", "-p", fmt.Sprint(port))
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start moto: %w", err)
	}
	exited := make(chan struct{})
	s := &Server{URL: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, out: out, exited: exited}
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.answers(ctx) {
			return s, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("moto exited: %s", out.String())
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("moto did not answer on %s within 30s: %s", s.URL, out.String())
		}
	}
}

func (s *Server) answers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/moto-api/", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return true
}

// Reset clears everything the server holds.
func (s *Server) Reset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/moto-api/reset", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reset moto: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reset moto: %s", resp.Status)
	}
	return nil
}

// Stop stops the server and its process group; a view in an account
// (InAccount), its proxy alone.
func (s *Server) Stop() {
	if s.proxy != nil {
		s.proxy.Close()
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	pgid := -s.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-s.exited
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// repoRoot is the module root, found from this file's location.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate mototest's source")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above " + filepath.Dir(file))
		}
		dir = parent
	}
}
