package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

// leaseMonitor audits the registry's leases at an interval: etcd lets any
// authenticated identity grant leases, so the registry counts those holding
// nothing for longer than a grace period, as metrics and as a line on out
// whenever that count changes.
type leaseMonitor struct {
	cli      *clientv3.Client
	prefix   string
	interval time.Duration
	tracker  registry.IdleTracker
	out      io.Writer

	leases, idle prometheus.Gauge
	lastIdle     int
}

func newLeaseMonitor(cli *clientv3.Client, prefix string, interval, grace time.Duration, out io.Writer, reg prometheus.Registerer) *leaseMonitor {
	m := &leaseMonitor{
		cli: cli, prefix: prefix, interval: interval, tracker: registry.IdleTracker{Grace: grace}, out: out,
		leases: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mcsd_registry_leases", Help: "Leases the registry's etcd holds, at the last audit."}),
		idle: prometheus.NewGauge(prometheus.GaugeOpts{Name: "mcsd_registry_idle_leases",
			Help: "Leases that have held no key for at least the audit's grace period: some client grants leases it does not use."}),
	}
	reg.MustRegister(m.leases, m.idle)
	return m
}

// run audits until ctx ends. A failed audit is reported and tried again at
// the next interval.
func (m *leaseMonitor) run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		if err := m.audit(ctx, time.Now()); err != nil && ctx.Err() == nil {
			fmt.Fprintf(m.out, "registry: lease audit failed: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *leaseMonitor) audit(ctx context.Context, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, m.interval)
	defer cancel()
	a, err := etcd.AuditLeases(ctx, m.cli, m.prefix)
	if err != nil {
		return err
	}
	idle := len(m.tracker.Observe(now, a.Idle))
	m.leases.Set(float64(a.Total))
	m.idle.Set(float64(idle))
	if idle != m.lastIdle {
		fmt.Fprintf(m.out, "registry: %d of %d leases have held nothing for %s or more\n", idle, a.Total, m.tracker.Grace)
		m.lastIdle = idle
	}
	return nil
}

// serveMetrics serves reg's metrics on addr until ctx ends and returns the
// URL it serves them at.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return "http://" + ln.Addr().String() + "/metrics", nil
}
