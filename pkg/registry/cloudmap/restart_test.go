package cloudmap

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// scanWatchingAPI reads, at the first DiscoverInstances (a restarted
// backend's scan of its records), the heartbeat of service beat, and notes
// whether it was written at since or later.
type scanWatchingAPI struct {
	API
	beat    string
	since   int64
	once    sync.Once
	checked bool
	fresh   bool
	err     error
}

func (s *scanWatchingAPI) DiscoverInstances(ctx context.Context, in *sd.DiscoverInstancesInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesOutput, error) {
	s.once.Do(func() {
		out, err := s.GetService(ctx, &sd.GetServiceInput{Id: aws.String(s.beat)})
		if err != nil {
			s.err = err
			return
		}
		hb, ok := decodeHeartbeat(aws.ToString(out.Service.Description))
		s.checked, s.fresh = true, ok && hb.At >= s.since
	})
	return s.API.DiscoverInstances(ctx, in, optFns...)
}

// TestRestartBeatsBeforeItScans: a backend restarted within its TTL writes
// its heartbeat before it reads its records back from every namespace: a
// long scan must not let the previous heartbeat age past the TTL, which
// would have every watcher withdraw the cluster's records until the
// heartbeat came.
func TestRestartBeatsBeforeItScans(t *testing.T) {
	srv := moto(t)
	id := registry.Identity{ClusterSet: randName("restart"), Cluster: "east"}
	opts := motoOptions(srv, id, 30*time.Second)
	a, _ := openExporting(t, opts, "10.0.0.1")
	beat := a.systemService(beatServiceName(a.enc.prefix)).ID
	mustDo(t, a.Close())

	client, err := NewClient(t.Context(), opts)
	mustDo(t, err)
	api := &scanWatchingAPI{API: client, beat: beat, since: time.Now().UnixMilli()}
	openClosed(t, func(ctx context.Context, opts Options) (*Backend, error) { return NewFromAPI(ctx, api, opts) }, opts)
	mustDo(t, api.err)
	if !api.checked {
		t.Fatal("the restarted backend read no records")
	}
	if !api.fresh {
		t.Error("the restarted backend scanned its records before writing its heartbeat")
	}
}

// slowScanAPI holds the first DiscoverInstances (a restarted backend's
// scan of its records) until the heartbeat service beat has been updated
// twice since, or for at most hold: a scan of a large or throttled account.
type slowScanAPI struct {
	API
	beat    string
	hold    time.Duration
	once    sync.Once
	beats   chan struct{}
	timeout bool
}

func (s *slowScanAPI) UpdateService(ctx context.Context, in *sd.UpdateServiceInput, optFns ...func(*sd.Options)) (*sd.UpdateServiceOutput, error) {
	out, err := s.API.UpdateService(ctx, in, optFns...)
	if err == nil && aws.ToString(in.Id) == s.beat {
		select {
		case s.beats <- struct{}{}:
		default:
		}
	}
	return out, err
}

func (s *slowScanAPI) DiscoverInstances(ctx context.Context, in *sd.DiscoverInstancesInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesOutput, error) {
	s.once.Do(func() {
		deadline := time.After(s.hold)
		// The beat written before the scan does not count.
		select {
		case <-s.beats:
		default:
		}
		for range 2 {
			select {
			case <-s.beats:
			case <-deadline:
				s.timeout = true
				return
			}
		}
	})
	return s.API.DiscoverInstances(ctx, in, optFns...)
}

// TestRestartBeatsWhileItScans: a restarted backend's scan that lasts
// longer than its TTL keeps its heartbeat fresh meanwhile, so that no
// watcher withdraws the cluster's records.
func TestRestartBeatsWhileItScans(t *testing.T) {
	srv := moto(t)
	id := registry.Identity{ClusterSet: randName("restart"), Cluster: "east"}
	const ttl = 3 * time.Second
	opts := motoOptions(srv, id, ttl)
	a, key := openExporting(t, opts, "10.0.0.1")
	beat := a.systemService(beatServiceName(a.enc.prefix)).ID
	rec := registrytest.StartWatch(t, openWatcher(t, motoOptions(srv, registry.Identity{ClusterSet: id.ClusterSet}, ttl)))
	aID := registry.RecordID{Cluster: "east", Service: key}
	// The watcher's first poll sweeps the whole account: 15 s was not
	// enough in one CI run, when every test of the package shared one.
	rec.WaitFor(t, time.Minute, "east's endpoint", func(_ registrytest.Event, v *registrytest.View) bool {
		return len(v.Endpoints[aID].Groups) == 1
	})
	mustDo(t, a.Close())

	client, err := NewClient(t.Context(), opts)
	mustDo(t, err)
	api := &slowScanAPI{API: client, beat: beat, hold: 3 * ttl, beats: make(chan struct{}, 1)}
	openClosed(t, func(ctx context.Context, opts Options) (*Backend, error) { return NewFromAPI(ctx, api, opts) }, opts)
	if api.timeout {
		t.Errorf("the heartbeat was not refreshed during a scan of %s, three times the TTL", api.hold)
	}
	rec.Quiet(t, ttl, "the records of a cluster restarting within its TTL withdrawn", func(e registrytest.Event) bool {
		u := e.Update
		return u != nil && (len(u.DeletedClusters) > 0 || len(u.DeletedEndpoints) > 0)
	})
}
