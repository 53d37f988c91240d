package harness

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
)

// registryServer reads the registry's own counters: what the registry did,
// as opposed to what mcsd asked of it.
type registryServer interface {
	counters(ctx context.Context) map[string]float64
	close()
}

// etcdServer is the embedded etcd, which runs in this process: its metrics
// are in the default Prometheus registry.
type etcdServer struct {
	cli *clientv3.Client
}

func newEtcdServer(url string) (*etcdServer, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &etcdServer{cli: cli}, nil
}

// etcdCounters are the etcd metrics reported, by the name the report uses.
var etcdCounters = map[string]string{
	"etcd_mvcc_put_total":              "put",
	"etcd_mvcc_delete_total":           "delete",
	"etcd_mvcc_txn_total":              "txn",
	"etcd_mvcc_range_total":            "range",
	"etcd_debugging_mvcc_events_total": "watch events sent",
}

func (s *etcdServer) counters(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	families, err := prometheus.DefaultGatherer.Gather()
	if err == nil {
		for _, f := range families {
			name, ok := etcdCounters[f.GetName()]
			if !ok {
				continue
			}
			for _, m := range f.GetMetric() {
				out[name] += m.GetCounter().GetValue()
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The revision counts every change; this read is one range more.
	if resp, err := s.cli.Get(ctx, "/mcsd-bench-revision"); err == nil {
		out["revision"] = float64(resp.Header.Revision)
		out["range"]--
	}
	return out
}

func (s *etcdServer) close() { _ = s.cli.Close() }

// follow tells tr when each cluster's export and endpoints records are
// written, from a watch of the whole registry, until ctx is done.
func (s *etcdServer) follow(ctx context.Context, tr *tracker) {
	for resp := range s.cli.Watch(ctx, "/", clientv3.WithPrefix()) {
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			// .../clusters/<cluster>/<exports|endpoints>/<namespace>/<name>
			parts := strings.Split(string(ev.Kv.Key), "/")
			if len(parts) < 5 || parts[len(parts)-5] != "clusters" {
				continue
			}
			cluster, kind, name := parts[len(parts)-4], parts[len(parts)-3], parts[len(parts)-1]
			switch kind {
			case "exports":
				tr.onRegistry(cluster, name, stageRegExport)
			case "endpoints":
				tr.onRegistry(cluster, name, stageRegEndpoints)
			}
		}
	}
}

// cloudMapServer is moto behind a reverse proxy that counts the Cloud Map
// API calls by operation (the X-Amz-Target header of the JSON protocol),
// those of the backend's sweep apart ("sweep <operation>").
type cloudMapServer struct {
	moto  *mototest.Server
	proxy *httptest.Server

	mu    sync.Mutex
	calls map[string]float64
}

func newCloudMapServer(ctx context.Context) (*cloudMapServer, error) {
	moto, err := mototest.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("start moto (needs python3; see hack/moto): %w", err)
	}
	target, err := url.Parse(moto.URL)
	if err != nil {
		moto.Stop()
		return nil, err
	}
	s := &cloudMapServer{moto: moto, calls: map[string]float64{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	s.proxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.Header.Get("X-Amz-Target")
		if i := strings.LastIndexByte(op, '.'); i >= 0 {
			op = op[i+1:]
		}
		if op != "" {
			// The backend marks its sweep's calls (and its change feed's)
			// in the User-Agent.
			if strings.Contains(r.Header.Get("User-Agent"), "mcsd/sweep") {
				op = sweepPrefix + op
			}
			s.mu.Lock()
			s.calls[op]++
			s.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	return s, nil
}

// sweepPrefix starts the counter names of the Cloud Map backend's sweep.
const sweepPrefix = "sweep "

// url is the endpoint the controllers use: the counting proxy.
func (s *cloudMapServer) url() string { return s.proxy.URL }

func (s *cloudMapServer) counters(context.Context) map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

func (s *cloudMapServer) close() {
	s.proxy.Close()
	s.moto.Stop()
}

// CloudMapServer is moto behind a proxy that counts the Cloud Map calls by
// operation (the sweep's apart, "sweep <operation>"), for other benchmarks:
// `make bench-scale -registry cloudmap` runs its members on it.
type CloudMapServer struct{ s *cloudMapServer }

// StartCloudMapServer starts moto (hack/moto) and the counting proxy.
func StartCloudMapServer(ctx context.Context) (*CloudMapServer, error) {
	s, err := newCloudMapServer(ctx)
	if err != nil {
		return nil, err
	}
	return &CloudMapServer{s: s}, nil
}

// URL is the endpoint for the backends: the counting proxy.
func (c *CloudMapServer) URL() string { return c.s.url() }

// Calls are the calls so far, by operation.
func (c *CloudMapServer) Calls() map[string]float64 { return c.s.counters(context.Background()) }

// Close stops the proxy and moto.
func (c *CloudMapServer) Close() { c.s.close() }
