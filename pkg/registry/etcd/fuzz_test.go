package etcd

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// FuzzDecodeMerge feeds what any writer may put under the clusterset's
// prefix through the watch's decoding, the View and the merge: nothing
// panics, and whatever the View counts passes the checks every importer
// relies on. make test runs it for a bounded time.
func FuzzDecodeMerge(f *testing.F) {
	good := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	spec := registry.ServiceSpec{Type: registry.ClusterSetIP, Ports: []registry.Port{{Name: "http", Protocol: "TCP", Port: 80}}}
	groups := []registry.EndpointGroup{{AddressType: "IPv4", Ports: []registry.EndpointPort{{Name: "http", Protocol: "TCP", Port: 8080}},
		Endpoints: []registry.Endpoint{{Addresses: []string{"10.0.0.1"}, Ready: true}}}}
	f.Add("c1", "exports/demo/web", good(exportValue{Spec: spec}), "endpoints/demo/web", good(endpointsValue{Groups: groups}), uint8(0))
	f.Add("evil", "exports/demo/web", good(exportValue{Spec: spec}), "endpoints/demo/web",
		[]byte(`{"groups":[{"addressType":"IPv4","endpoints":[{"addresses":["127.0.0.1"]}]}]}`), uint8(1))
	f.Add("c2", "exports/demo/web", []byte(`{"spec":{"type":"ClusterSetIP","ports":[{"protocol":"ICMP","port":70000}]}}`),
		"endpoints/demo/web", []byte(`{"groups":[{"addressType":"IPv6","ports":[{"port":-1}],"endpoints":[{"addresses":["fe80::1"]}]}]}`), uint8(2))
	f.Add("c3", "exports/demo/web", []byte(`{"spec":{"type":"Headless","exportedLabels":{"bad key":"v"},"ipFamilies":["IPv4","IPv4"]}}`),
		"alive", []byte(`not json`), uint8(3))
	f.Add("c4", "exports/demo/web", []byte(`{"spec":null}`), "endpoints/demo/web", []byte(`{"groups":null}`), uint8(4))

	f.Fuzz(func(t *testing.T, cluster, key1 string, value1 []byte, key2 string, value2 []byte, leases uint8) {
		if cluster == "good" || strings.HasPrefix(cluster, "good/") {
			// The fuzzed writer stands for another cluster than good: the
			// same input, under a name of its own.
			cluster = "not-" + cluster
		}
		w := &watch{
			c:       &conn{keys: newKeys("/mcsd", "set"), opts: Options{Identity: registry.Identity{ClusterSet: "set", Cluster: "self"}}},
			h:       nil,
			log:     logr.Discard(),
			members: map[string]member{}, records: map[string]*record{}, byCluster: map[string]map[string]bool{}, revs: map[string]int64{},
		}
		root := w.c.keys.clusters()
		// A good cluster beside the fuzzed one, and the fuzzed cluster's
		// alive record on a lease or not.
		lease := int64(leases & 3)
		events := []*clientv3.Event{
			put(root+"good/alive", []byte(`{"cluster":"good"}`), 7, 1),
			put(root+"good/exports/demo/web", good(exportValue{Spec: spec}), 7, 2),
			put(root+"good/endpoints/demo/web", good(endpointsValue{Groups: groups}), 7, 3),
		}
		if leases&4 != 0 {
			events = append(events, put(root+cluster+"/alive", []byte(`{}`), lease, 4))
		}
		events = append(events,
			put(root+cluster+"/"+key1, value1, lease, 5),
			put(root+cluster+"/"+key2, value2, int64(leases>>3&3), 6))
		v := clusterset.NewView()
		v.OnUpdate(registry.Update{Full: true})
		v.OnUpdate(w.changes(events))
		if leases&32 != 0 {
			// The fuzzed cluster's alive record goes again.
			v.OnUpdate(w.changes([]*clientv3.Event{{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(root + cluster + "/alive"), ModRevision: 8}}}))
		}

		for _, key := range v.Keys("") {
			exports := v.Exports(key)
			for _, e := range exports {
				if err := registry.ValidateExport(e); err != nil {
					t.Fatalf("View counts an invalid export: %v", err)
				}
			}
			for _, e := range v.Endpoints(key) {
				if err := registry.ValidateEndpoints(e); err != nil {
					t.Fatalf("View counts invalid endpoints: %v", err)
				}
			}
			res := merge.Merge(exports)
			if len(res.Clusters) != len(exports) {
				t.Fatalf("merge of %d exports has clusters %v", len(exports), res.Clusters)
			}
			if key == (registry.ServiceKey{Namespace: "demo", Name: "web"}) {
				if _, ok := v.Endpoints(key)["good"]; !ok {
					t.Fatalf("good cluster's endpoints lost: %s", fmt.Sprint(v.Rejected(key)))
				}
			}
		}
	})
}

func put(key string, value []byte, lease, rev int64) *clientv3.Event {
	return &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{
		Key: []byte(key), Value: value, Lease: lease, CreateRevision: rev, ModRevision: rev,
	}}
}
