package netns

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dial connects to addr from inside the named network namespace, as a
// process there would, without starting one: a socket belongs to the
// namespace of the thread that creates it, so the socket is made on a
// thread moved into the namespace and back. The thread is not left to end
// (a locked goroutine's thread ends with it) unless it cannot return: a
// thread that ends sends the parent-death signal to the processes it
// started, and the agent's children (runc, say) die with it. The
// connection is used as any other.
func Dial(ctx context.Context, name, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		back, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open this thread's network namespace: %w", err)}
			return
		}
		defer func() { _ = unix.Close(back) }()
		fd, err := unix.Open(filepath.Join(Dir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open network namespace %s: %w", name, err)}
			return
		}
		defer func() { _ = unix.Close(fd) }()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter network namespace %s: %w", name, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if unix.Setns(back, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // back in its own namespace: the thread serves on
		}
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}
