package harness

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/test/testbed"
)

// profileAPIServer starts a CPU profile of cluster c's kube-apiserver (its
// /debug/pprof/profile) for d, written to file; the returned function waits
// for it to end. It shows where the testbed's own CPU goes while mcsd
// writes, which bounds what mcsd can reach on this machine.
func (r *run) profileAPIServer(ctx context.Context, c *testbed.Cluster, d time.Duration, file string) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fetchProfile(ctx, c.Config, d, file); err != nil {
			r.logf("profile the API server of %s: %v", c.ID, err)
		}
	}()
	return func() { <-done }
}

func fetchProfile(ctx context.Context, base *rest.Config, d time.Duration, file string) error {
	cfg := rest.CopyConfig(base)
	cfg.Timeout = d + time.Minute
	cfg.QPS, cfg.Burst = 0, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(int(d.Seconds()))).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("get profile: %w", err)
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	return nil
}
