package cloudmap

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/mcsd-io/mcsd/pkg/registry"
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
