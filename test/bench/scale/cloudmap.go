package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/test/bench/harness"
)

// Cloud Map members: N simulated clusters, each the real Cloud Map backend
// as a controller opens it (its heartbeat, its exports, its own change-feed
// watch, default poll, sweep and TTL), on moto behind a proxy that counts
// every call. They measure what a cluster costs Cloud Map while nothing
// changes, by operation, and how long a change takes to reach every other
// member.

// cloudMapRun is one clusterset size's Cloud Map figures.
type cloudMapRun struct {
	N        int `json:"clusters"`
	Services int `json:"services"`
	// IdlePerMemberPerMinute are the calls of one member per minute while
	// nothing changed, sweeps excluded (every member sends the same).
	IdlePerMemberPerMinute float64            `json:"idleCallsPerMemberPerMinute"`
	IdleByOperation        map[string]float64 `json:"idleByOperation"`
	// Change: a member's endpoint change, put → delivered at every other
	// member.
	Changes    int           `json:"changes"`
	Deliveries int           `json:"deliveries"`
	P50        time.Duration `json:"p50"`
	P99        time.Duration `json:"p99"`
}

// runCloudMap runs the Cloud Map members for a clusterset of n.
func runCloudMap(ctx context.Context, cfg config, n int) (cloudMapRun, error) {
	res := cloudMapRun{N: n, Services: cfg.CloudMapServices}
	srv, err := harness.StartCloudMapServer(ctx)
	if err != nil {
		return res, err
	}
	defer srv.Close()
	set := fmt.Sprintf("scale-%d", n)
	members := make([]*member, n)
	defer func() {
		for _, m := range members {
			if m != nil {
				m.stop()
			}
		}
	}()
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			id := fmt.Sprintf("m%03d", i)
			reg, err := cloudmap.New(ctx, cloudmap.Options{
				Identity: registry.Identity{ClusterSet: set, Cluster: id},
				Region:   mototest.Region, Endpoint: srv.URL(), Credentials: mototest.Credentials,
			})
			if err != nil {
				return fmt.Errorf("backend of %s: %w", id, err)
			}
			members[i] = startMember(ctx, id, reg, false)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}

	// Each Service exported by k members, 3 endpoints each.
	k := exporters(cfg.K, n)
	owned := make([][]registry.ServiceKey, n)
	for s := range cfg.CloudMapServices {
		key := registry.ServiceKey{Namespace: namespace(s % 5), Name: fmt.Sprintf("svc-%d", s)}
		for j := range k {
			owned[(s+j)%n] = append(owned[(s+j)%n], key)
		}
	}
	groups := func(m, v int) []registry.EndpointGroup { return endpointGroups(3, m, 0, v) }
	g = errgroup.Group{}
	g.SetLimit(8)
	for m, keys := range owned {
		g.Go(func() error {
			for _, key := range keys {
				if err := members[m].reg.Publish(ctx, key, spec(), groups(m, 0)); err != nil {
					return fmt.Errorf("publish %s of m%03d: %w", key, m, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	records := cfg.CloudMapServices * k
	if err := waitMembers(ctx, members, cfg.Timeout, "every member holds every record", func(m *member) bool { return m.records() == records }); err != nil {
		return res, err
	}

	// Idle: every call counted for the window, by operation, once the
	// cold start's operations have left the feed's window (its overlap
	// after the latest operation seen) and every member has beaten once.
	if err := harness.Sleep(ctx, cloudmap.DefaultTTL/3+cloudmap.DefaultFeedOverlap); err != nil {
		return res, err
	}
	before := srv.Calls()
	fmt.Fprintf(os.Stderr, "[scale] cloudmap N=%d: counting idle calls for %s\n", n, cfg.CloudMapIdle)
	if err := harness.Sleep(ctx, cfg.CloudMapIdle); err != nil {
		return res, err
	}
	res.IdleByOperation = map[string]float64{}
	total := 0.0
	for op, v := range srv.Calls() {
		if d := v - before[op]; d > 0 && !strings.HasPrefix(op, "sweep ") {
			per := d / float64(n) / cfg.CloudMapIdle.Minutes()
			res.IdleByOperation[op] = per
			total += per
		}
	}
	res.IdlePerMemberPerMinute = total

	// Changes: one every 2 s on average, from members in turn, each timed from the
	// start of its put to its delivery at every other member (a new
	// address).
	for _, m := range members {
		m.measure(true)
	}
	var errs []error
	puts := map[string]time.Time{}
	for c := range cfg.CloudMapChanges {
		w := c % n
		for len(owned[w]) == 0 {
			w = (w + 1) % n
		}
		g := groups(w, c+1)
		puts[g[0].Endpoints[0].Addresses[0]] = time.Now()
		if err := members[w].reg.PutEndpoints(ctx, owned[w][0], g); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Changes++
		// 1 to 3 s apart, so that the changes do not keep one phase with
		// the members' polls.
		if err := harness.Sleep(ctx, time.Second+rand.N(2*time.Second)); err != nil {
			return res, err
		}
	}
	// Each change reaches the n-1 others; the members that import a
	// Service from several clusters see every one.
	arrivals := func() []time.Duration {
		var out []time.Duration
		for _, m := range members {
			m.mu.Lock()
			for a, put := range puts {
				if t, ok := m.arrived[a]; ok {
					out = append(out, t.Sub(put))
				}
			}
			m.mu.Unlock()
		}
		return out
	}
	want := res.Changes * (n - 1)
	_ = waitFor(ctx, 30*time.Second, "every change delivered", func() bool { return len(arrivals()) >= want })
	lat := arrivals()
	for _, m := range members {
		m.measure(false)
	}
	res.Deliveries = len(lat)
	res.P50, res.P99 = percentile(lat, 50), percentile(lat, 99)
	return res, errors.Join(errs...)
}

// waitMembers polls until cond holds for every member.
func waitMembers(ctx context.Context, members []*member, timeout time.Duration, what string, cond func(*member) bool) error {
	return waitFor(ctx, timeout, what, func() bool {
		return !slices.ContainsFunc(members, func(m *member) bool { return m != nil && !cond(m) })
	})
}

func (c cloudMapRun) line() string {
	return fmt.Sprintf("[scale] cloudmap N=%d: idle %.1f calls/member/min (%s); change p50 %s p99 %s (%d deliveries of %d changes)",
		c.N, c.IdlePerMemberPerMinute, perOp(c.IdleByOperation), ms(c.P50), ms(c.P99), c.Deliveries, c.Changes)
}

// perOp is calls by operation as "op n, op n", one decimal.
func perOp(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
