// Package etcdcluster runs an etcd cluster of several members for tests:
// real etcd processes (the testbed's pinned etcd binary) on the loopback
// interface, each with its own data directory, so that a member can be
// killed with SIGKILL and started again on its data. Every member's peer
// port sits behind a proxy of this package, which can cut a member off from
// the others (a partition) and let it back.
//
// Nothing leaves the loopback interface; Close kills every process it
// started.
package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcsd-io/mcsd/test/testbed"
)

// Config configures a Cluster.
type Config struct {
	// Binary is the etcd binary.
	Binary string
	// Dir holds the members' data directories and logs.
	Dir string
	// Members is the number of members. Default 3.
	Members int
	// Log, when set, receives the members' output.
	Log io.Writer
}

// Cluster is a running etcd cluster.
type Cluster struct {
	cfg     Config
	members []*member

	mu          sync.Mutex
	partitioned map[int]bool
}

// member is one etcd process and its peer proxy.
type member struct {
	name      string
	dir       string
	clientURL string
	peerURL   string // the member's own peer listener
	proxyURL  string // what the other members dial
	id        uint64 // known once the cluster is up; guarded by Cluster.mu

	proxy *peerProxy

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a new cluster in Dir, whose members' data directories it
// empties first, and waits until it is healthy. A start that fails (a
// member that cannot bind a port taken in the meantime, or stays
// unhealthy) is tried again from empty data directories on new ports, up
// to three times; the error tells each member's state and its log's end.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.Binary == "" {
		return nil, errors.New("etcdcluster: no etcd binary")
	}
	if cfg.Dir == "" {
		return nil, errors.New("etcdcluster: no directory")
	}
	var errs []error
	for try := 1; try <= 3; try++ {
		c, err := start(ctx, cfg)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("try %d: %w", try, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func start(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, partitioned: map[int]bool{}}
	fail := func(err error) (*Cluster, error) {
		err = fmt.Errorf("%w%s", err, c.diagnose())
		c.Close()
		return nil, err
	}
	var initial []string
	for i := range cfg.Members {
		// The proxy listens from now on; the member's own ports are free
		// until it binds them, a moment later.
		ports, err := testbed.FreePorts(2)
		if err != nil {
			return fail(err)
		}
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(cfg.Dir, fmt.Sprintf("m%d", i)),
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		}
		if m.proxy, err = newPeerProxy(c, i, m.peerURL); err != nil {
			return fail(err)
		}
		m.proxyURL = m.proxy.url
		c.mu.Lock()
		c.members = append(c.members, m)
		c.mu.Unlock()
		initial = append(initial, m.name+"="+m.proxyURL)
	}
	for _, m := range c.members {
		// A new cluster: no data of an earlier one.
		if err := os.RemoveAll(m.dir); err != nil {
			return fail(err)
		}
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			return fail(err)
		}
		if err := c.startMember(m, strings.Join(initial, ",")); err != nil {
			return fail(err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return fail(err)
	}
	// WaitHealthy passes over a member that is not running; the others
	// make a quorum without it.
	if err := c.allRunning(); err != nil {
		return fail(err)
	}
	if err := c.learnIDs(ctx); err != nil {
		return fail(err)
	}
	return c, nil
}

// allRunning fails for the first member whose process does not run.
func (c *Cluster) allRunning() error {
	for i, m := range c.members {
		if !c.Running(i) {
			return fmt.Errorf("etcd member %s exited", m.name)
		}
	}
	return nil
}

// diagnose tells, for an error, whether each member runs and how its log
// ends.
func (c *Cluster) diagnose() string {
	var b strings.Builder
	for _, m := range c.members {
		m.mu.Lock()
		state := "not started"
		if m.done != nil {
			select {
			case <-m.done: // cmd.Wait has returned
				state = "exited: " + m.cmd.ProcessState.String()
			default:
				state = "running"
			}
		}
		m.mu.Unlock()
		fmt.Fprintf(&b, "\n  etcd member %s (client %s, peer %s): %s", m.name, m.clientURL, m.peerURL, state)
		if out, err := os.ReadFile(filepath.Join(m.dir, "etcd.log")); err == nil && len(out) > 0 {
			if len(out) > 1500 {
				out = out[len(out)-1500:]
			}
			fmt.Fprintf(&b, "\n    %s", strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "\n    "))
		}
	}
	return b.String()
}

// startMember runs m's etcd process; initial is the initial cluster, used
// only when the member's data directory is new.
func (c *Cluster) startMember(m *member, initial string) error {
	args := []string{
		"--name", m.name,
		"--data-dir", filepath.Join(m.dir, "data"),
		"--listen-client-urls", m.clientURL,
		"--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.proxyURL,
		"--initial-cluster", initial,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", filepath.Base(c.cfg.Dir),
		"--heartbeat-interval", "100",
		"--election-timeout", "1000",
		"--unsafe-no-fsync",
		"--log-level", "warn",
	}
	log, err := os.OpenFile(filepath.Join(m.dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.cfg.Binary, args...)
	var out io.Writer = log
	if c.cfg.Log != nil {
		out = io.MultiWriter(log, c.cfg.Log)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a signal to the test's group does not reach
	// it, and Close kills it whatever happens.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start etcd member %s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(done)
	}()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	return nil
}

// learnIDs records every member's id, which the peer proxies need to tell
// who is talking.
func (c *Cluster) learnIDs(ctx context.Context) error {
	cli, err := c.client(c.ClientURLs())
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("list etcd members: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pm := range resp.Members {
		for _, m := range c.members {
			if pm.Name == m.name {
				m.id = pm.ID
			}
		}
	}
	for _, m := range c.members {
		if m.id == 0 {
			return fmt.Errorf("etcd member %s not in the member list", m.name)
		}
	}
	return nil
}

// ClientURLs returns every member's client URL.
func (c *Cluster) ClientURLs() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL
	}
	return out
}

// Members returns the number of members.
func (c *Cluster) Members() int { return len(c.members) }

func (c *Cluster) client(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

// Leader returns the index of the member that leads, as the running
// members that are not partitioned see it.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	for i, m := range c.members {
		if !c.Running(i) || c.isPartitioned(i) {
			continue
		}
		cli, err := c.client([]string{m.clientURL})
		if err != nil {
			return -1, err
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.clientURL)
		cancel()
		_ = cli.Close()
		if err != nil || st.Leader == 0 {
			continue
		}
		// A member still names a leader that is gone or cut off until its
		// election timeout.
		if j := c.memberOf(st.Leader); j >= 0 && c.Running(j) && !c.isPartitioned(j) {
			return j, nil
		}
	}
	return -1, errors.New("no etcd member knows a leader")
}

// WaitLeader waits until the running members that are not partitioned agree
// on a leader, and returns it.
func (c *Cluster) WaitLeader(ctx context.Context) (int, error) {
	for {
		if i, err := c.Leader(ctx); err == nil {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("wait for an etcd leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitHealthy waits until every running member answers a linearizable read.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i, m := range c.members {
		if !c.Running(i) {
			continue
		}
		cli, err := c.client([]string{m.clientURL})
		if err != nil {
			return err
		}
		for {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = cli.Get(rctx, "health")
			rcancel()
			if err == nil {
				break
			}
			if !c.Running(i) {
				_ = cli.Close()
				return fmt.Errorf("etcd member %s exited before it was healthy: %w", m.name, err)
			}
			select {
			case <-ctx.Done():
				_ = cli.Close()
				return fmt.Errorf("etcd member %s not healthy: %w", m.name, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
		_ = cli.Close()
	}
	return nil
}

// Running reports whether member i's process runs.
func (c *Cluster) Running(i int) bool {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Pids are the process ids of the members that run.
func (c *Cluster) Pids() []int {
	var pids []int
	for i, m := range c.members {
		if !c.Running(i) {
			continue
		}
		m.mu.Lock()
		pids = append(pids, m.cmd.Process.Pid)
		m.mu.Unlock()
	}
	return pids
}

// Kill kills member i with SIGKILL and waits until it is gone.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Restart starts member i again on its data, after Kill.
func (c *Cluster) Restart(i int) error {
	if c.Running(i) {
		return nil
	}
	var initial []string
	for _, m := range c.members {
		initial = append(initial, m.name+"="+m.proxyURL)
	}
	return c.startMember(c.members[i], strings.Join(initial, ","))
}

// KillAll kills every member.
func (c *Cluster) KillAll() {
	for i := range c.members {
		c.Kill(i)
	}
}

// RestartAll starts every member that does not run and waits until the
// cluster is healthy.
func (c *Cluster) RestartAll(ctx context.Context) error {
	for i := range c.members {
		if err := c.Restart(i); err != nil {
			return err
		}
	}
	err := c.WaitHealthy(ctx)
	if err == nil {
		err = c.allRunning()
	}
	if err != nil {
		return fmt.Errorf("%w%s", err, c.diagnose())
	}
	return nil
}

// Partition cuts member i off from the other members: no peer message
// passes between them in either direction, and the connections that carry
// them are closed. Its clients still reach it (a member on the minority
// side of a partition answers, with errors, until they give up on it).
func (c *Cluster) Partition(i int) {
	c.mu.Lock()
	c.partitioned[i] = true
	c.mu.Unlock()
	for _, m := range c.members {
		m.proxy.cut(func(from, to int) bool { return from == i || to == i })
	}
}

// Heal ends member i's partition.
func (c *Cluster) Heal(i int) {
	c.mu.Lock()
	delete(c.partitioned, i)
	c.mu.Unlock()
}

func (c *Cluster) isPartitioned(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.partitioned[i]
}

// blocked reports whether a peer request from member from (-1: unknown) to
// member to must not pass.
func (c *Cluster) blocked(from, to int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.partitioned[to] || (from >= 0 && c.partitioned[from])
}

// memberByID returns the index of the member with the etcd id id (hex, as
// etcd's peer requests name their sender), or -1.
func (c *Cluster) memberByID(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.id != 0 && fmt.Sprintf("%x", m.id) == id {
			return i
		}
	}
	return -1
}

// memberOf returns the index of the member with etcd id id, or -1.
func (c *Cluster) memberOf(id uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.id != 0 && m.id == id {
			return i
		}
	}
	return -1
}

// Close kills every member and stops the proxies. The data stays in Dir.
func (c *Cluster) Close() {
	for i, m := range c.members {
		c.Kill(i)
		if m.proxy != nil {
			m.proxy.close()
		}
	}
}

// StartT starts a cluster of the testbed's etcd binary (built if need be)
// in a temporary directory for a test, closed when the test ends.
func StartT(t testing.TB) *Cluster {
	t.Helper()
	ctx := context.Background()
	bins, err := testbed.EnsureBinaries(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Config{Binary: bins.Etcd, Dir: filepath.Join(t.TempDir(), "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
