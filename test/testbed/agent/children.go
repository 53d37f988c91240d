package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// children supervises the agent's long-running helpers (the relay's node
// side, kube-proxy, CoreDNS): each is restarted when it exits, after a
// growing delay, until the agent stops; each dies with the agent.
type children struct {
	log   logr.Logger
	mu    sync.Mutex
	cmds  []*exec.Cmd
	names map[*exec.Cmd]string
	done  bool
}

// run starts name's command line (from newCmd, called for every start),
// logging to logPath, and keeps it running until ctx ends. started, when
// not nil, is called after each start with the log's size before it: where
// that start's lines begin.
func (c *children) run(ctx context.Context, name, logPath string, newCmd func() *exec.Cmd, started func(logFrom int64)) {
	go func() {
		delay := 200 * time.Millisecond
		for ctx.Err() == nil {
			cmd := newCmd()
			logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			var logFrom int64
			if err == nil {
				cmd.Stdout, cmd.Stderr = logf, logf
				if st, err := logf.Stat(); err == nil {
					logFrom = st.Size()
				}
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			c.mu.Lock()
			if c.done {
				c.mu.Unlock()
				return
			}
			err = cmd.Start()
			if err == nil {
				c.cmds = append(c.cmds, cmd)
				if c.names == nil {
					c.names = map[*exec.Cmd]string{}
				}
				c.names[cmd] = name
			}
			c.mu.Unlock()
			if err == nil && started != nil {
				started(logFrom)
			}
			if err == nil {
				err = cmd.Wait()
				c.forget(cmd)
			}
			if logf != nil {
				_ = logf.Close()
			}
			if ctx.Err() != nil {
				return
			}
			c.log.Error(err, "helper exited; starting it again", "helper", name, "log", filepath.Base(logPath), "delay", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 5*time.Second)
		}
	}()
}

// forget drops a helper that has exited: its process group is gone.
func (c *children) forget(cmd *exec.Cmd) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cmds = slices.DeleteFunc(c.cmds, func(x *exec.Cmd) bool { return x == cmd })
	delete(c.names, cmd)
}

// restart kills name's process group; run starts it again.
func (c *children) restart(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range c.cmds {
		if c.names[cmd] == name && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// stopAll kills every helper's process group.
func (c *children) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	for _, cmd := range c.cmds {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}
