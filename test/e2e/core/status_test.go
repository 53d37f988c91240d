package core

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mcsd-io/mcsd/internal/status"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	etcdregistry "github.com/mcsd-io/mcsd/pkg/registry/etcd"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

var update = flag.Bool("update", false, "write testdata/*.golden from the current output")

// c1 and c2 export status/web with conflicting http ports, c1 first. The
// status report, read from the registry without joining the clusterset and
// from c1, shows both exports, the conflict won by c1, and c1's export and
// import; its times and lease ids are masked before comparing it with
// testdata/status.golden.
func TestStatusShowsConflict(t *testing.T) {
	ns, c1 := setUpTest(t, "status")
	c2 := env.Client(t, "c2")

	exportFirst(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 1, Ports: []corev1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
	}})
	fw.Deploy(t, c2, fw.App{Namespace: ns, Name: "web", Replicas: 1, Ports: []corev1.ServicePort{
		{Name: "http", Port: 81, TargetPort: intstr.FromInt32(8081), Protocol: corev1.ProtocolTCP},
	}})
	waitPods(t, c2, ns, "web", 1)
	fw.Export(t, c2, ns, "web")
	for _, id := range []string{"c1", "c2"} {
		waitExportCondition(t, env.Client(t, id), ns, "web", "Conflict", metav1.ConditionTrue, "PortConflict")
	}

	path := filepath.Join("testdata", "status.golden")
	var got string
	poll.Until(t, timeout, "status report as "+path, func() (bool, string) {
		got = statusReport(t, ns)
		if *update {
			return true, ""
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run the test with -update to write it)", err)
		}
		diff := cmp.Diff(string(want), got)
		return diff == "", "(-want +got):\n" + diff
	})
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// statusReport runs the status logic against the env's registry, with c1 as
// the local cluster and the clusterset read from it, and renders its table
// with times and lease ids masked.
func statusReport(t *testing.T, ns string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := status.Collect(ctx, status.Options{
		OpenWatcher: func(ctx context.Context, clusterSet string) (registry.ReadOnlyWatcher, error) {
			return etcdregistry.NewWatcher(ctx, etcdregistry.Options{
				Identity:  registry.Identity{ClusterSet: clusterSet},
				Endpoints: []string{env.RegistryURL()},
			})
		},
		Local:     env.Client(t, "c1"),
		Namespace: ns,
	})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	maskReport(&r)
	var b bytes.Buffer
	if err := status.WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// maskReport replaces what changes from run to run: every time by the
// report's (fixed) time, so that ages read 0s, and lease ids by "LEASE".
func maskReport(r *status.Report) {
	at := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	mask := func(ts *time.Time) {
		if !ts.IsZero() {
			*ts = at
		}
	}
	r.Time = at
	for i := range r.Clusters {
		c := &r.Clusters[i]
		mask(&c.Since)
		mask(&c.LastSeen)
		mask(&c.Expires)
		if c.Lease != "" {
			c.Lease = "LEASE"
		}
	}
	for i := range r.Services {
		s := &r.Services[i]
		mask(&s.Import.Published)
		for j := range s.Exports {
			if e := s.Exports[j].Endpoints; e != nil {
				mask(&e.Updated)
			}
		}
	}
	if l := r.Local; l != nil {
		for i := range l.Exports {
			for j := range l.Exports[i].Conditions {
				mask(&l.Exports[i].Conditions[j].LastTransitionTime)
			}
		}
		for i := range l.Imports {
			mask(&l.Imports[i].LastChange)
			mask(&l.Imports[i].Published)
			if c := l.Imports[i].Ready; c != nil {
				mask(&c.LastTransitionTime)
			}
		}
	}
}
