package status

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1beta1 "github.com/mcsd-io/mcsd/api/about/v1beta1"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

var update = flag.Bool("update", false, "write the golden files in testdata/ from the current output")

// now is the time every report of the tests is read at.
var now = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func ago(d time.Duration) time.Time { return now.Add(-d) }

var (
	web = registry.ServiceKey{Namespace: "shop", Name: "web"}
	db  = registry.ServiceKey{Namespace: "data", Name: "db"}
)

func spec(typ registry.ServiceType, ports ...registry.Port) registry.ServiceSpec {
	return registry.ServiceSpec{Type: typ, Ports: ports}
}

func port(name string, n int32) registry.Port {
	return registry.Port{Name: name, Protocol: corev1.ProtocolTCP, Port: n}
}

func eps(cluster string, svc registry.ServiceKey, updated time.Time, ready, notReady int) registry.Endpoints {
	g := registry.EndpointGroup{AddressType: discoveryv1.AddressTypeIPv4}
	for i := range ready + notReady {
		g.Endpoints = append(g.Endpoints, registry.Endpoint{Addresses: []string{"10.0.0." + string(rune('1'+i))}, Ready: i < ready})
	}
	return registry.Endpoints{Cluster: cluster, Service: svc, Groups: []registry.EndpointGroup{g}, Updated: updated}
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(at)}
}

func meta(ns, name string, created, written time.Time) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace:         ns,
		Name:              name,
		CreationTimestamp: metav1.NewTime(created),
		ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "mcsd", Operation: metav1.ManagedFieldsOperationUpdate, Time: ptr.To(metav1.NewTime(written))}},
	}
}

// etcdConflict is a clusterset on etcd: three clusters, c1 local; c1 and c2
// export shop/web with conflicting ports and types, c3 exports data/db
// without endpoints.
func etcdConflict() Input {
	msg := `ports: using "http" TCP/80 from cluster "c1" (oldest export with this port); cluster "c2" has "http" TCP/81. ` +
		`type: using "ClusterSetIP" from cluster "c1" (oldest export); cluster "c2" has "Headless"`
	webSlice := discoveryv1.EndpointSlice{
		ObjectMeta: meta("shop", "web-c1-abc", ago(time.Hour), ago(40*time.Second)),
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}, {Addresses: []string{"10.0.0.2"}}},
	}
	webSlice.Labels = map[string]string{mcsv1beta1.LabelServiceName: "web", discoveryv1.LabelManagedBy: wellknown.ManagedBy}
	webSlice2 := *webSlice.DeepCopy()
	webSlice2.Name = "web-c2-def"
	webSlice2.ManagedFields[0].Time = ptr.To(metav1.NewTime(ago(12 * time.Second)))
	return Input{
		ClusterSet: "prod",
		Time:       now,
		Snapshot: Snapshot{
			Clusters: []registry.Cluster{
				{ID: "c2", Since: ago(3 * time.Hour), TTL: 30 * time.Second},
				{ID: "c1", Since: ago(26 * time.Hour), TTL: 30 * time.Second},
				{ID: "c3", Since: ago(90 * time.Second), TTL: 30 * time.Second},
			},
			Exports: []registry.Export{
				{Cluster: "c2", Service: web, Spec: spec(registry.Headless, port("http", 81), port("admin", 9090)), Order: 20},
				{Cluster: "c1", Service: web, Spec: spec(registry.ClusterSetIP, port("http", 80)), Order: 10},
				{Cluster: "c3", Service: db, Spec: spec(registry.ClusterSetIP, port("", 5432)), Order: 30},
			},
			Endpoints: []registry.Endpoints{
				eps("c1", web, ago(42*time.Second), 2, 0),
				eps("c2", web, ago(15*time.Second), 1, 1),
			},
		},
		Leases: []registry.Lease{
			{Cluster: "c1", ID: "694d7c5a5e2bb10b", Granted: 30 * time.Second, Remaining: 27 * time.Second, Renewed: ago(3 * time.Second)},
			{Cluster: "c2", ID: "694d7c5a5e2bb1a4", Granted: 30 * time.Second, Remaining: 21 * time.Second, Renewed: ago(9 * time.Second)},
		},
		Local: &LocalObjects{
			Cluster: "c1",
			Exports: []mcsv1beta1.ServiceExport{
				{
					ObjectMeta: meta("shop", "web", ago(time.Hour), ago(time.Minute)),
					Status: mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{
						cond("Valid", metav1.ConditionTrue, "Valid", "", ago(time.Hour)),
						cond("Ready", metav1.ConditionTrue, "Exported", "", ago(time.Hour)),
						cond("Conflict", metav1.ConditionTrue, "PortConflict,TypeConflict", msg, ago(time.Minute)),
					}},
				},
				{
					ObjectMeta: meta("shop", "cart", ago(time.Hour), ago(time.Hour)),
					Status: mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{
						cond("Valid", metav1.ConditionFalse, "NoService", "Service shop/cart does not exist", ago(time.Hour)),
						cond("Ready", metav1.ConditionFalse, "Pending", "", ago(time.Hour)),
					}},
				},
			},
			Imports: []mcsv1beta1.ServiceImport{
				{
					ObjectMeta: meta("shop", "web", ago(time.Hour), ago(time.Minute)),
					Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{
						{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
						{Name: "admin", Protocol: corev1.ProtocolTCP, Port: 9090},
					}},
					Status: mcsv1beta1.ServiceImportStatus{
						Clusters:   []mcsv1beta1.ClusterStatus{{Cluster: "c1"}, {Cluster: "c2"}},
						Conditions: []metav1.Condition{cond("Ready", metav1.ConditionTrue, "Ready", "Cluster IP 10.96.0.10", ago(time.Hour))},
					},
				},
				{
					ObjectMeta: meta("data", "db", ago(time.Minute), ago(time.Minute)),
					Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP},
					Status: mcsv1beta1.ServiceImportStatus{
						Conditions: []metav1.Condition{cond("Ready", metav1.ConditionFalse, "Pending", "The import has no ports", ago(time.Minute))},
					},
				},
				{
					ObjectMeta: meta("old", "gone", ago(2*time.Hour), ago(2*time.Hour)),
					Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless},
				},
			},
			Slices: []discoveryv1.EndpointSlice{webSlice, webSlice2},
		},
	}
}

// cloudMap is a clusterset on Cloud Map, limited to one namespace: two mcsd
// clusters with heartbeats, one overdue, and a cluster of the AWS
// controller without one, whose export, the oldest, carries no labels:
// the mcsd clusters' conflict on them is won by the older of the two.
func cloudMap() Input {
	labelled := func(s registry.ServiceSpec, tier string) registry.ServiceSpec {
		s.ExportedLabels = map[string]string{"tier": tier}
		return s
	}
	return Input{
		ClusterSet: "prod",
		Namespace:  "shop",
		Time:       now,
		Snapshot: Snapshot{
			Clusters: []registry.Cluster{
				{ID: "east", Since: ago(48 * time.Hour), LastSeen: ago(12 * time.Second), TTL: time.Minute},
				{ID: "west", Since: ago(5 * time.Minute), LastSeen: ago(65 * time.Second), TTL: time.Minute},
				{ID: "aws"},
			},
			Exports: []registry.Export{
				{Cluster: "east", Service: web, Spec: labelled(spec(registry.ClusterSetIP, port("http", 80)), "web"), Order: 1700000000000},
				{Cluster: "aws", Service: web, Spec: spec(registry.ClusterSetIP, port("http", 80)), Order: 1700000000000, Partial: true},
				{Cluster: "west", Service: web, Spec: labelled(spec(registry.ClusterSetIP, port("http", 8080)), "api"), Order: 1700000000700},
				{Cluster: "west", Service: db, Spec: spec(registry.ClusterSetIP, port("pg", 5432)), Order: 1700000000500},
			},
			Endpoints: []registry.Endpoints{
				eps("east", web, ago(2*time.Minute), 3, 0),
				eps("aws", web, time.Time{}, 1, 0),
			},
		},
		Warnings: []string{"the local cluster's id cannot be read: cluster identity missing"},
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Input
	}{
		{"empty", Input{ClusterSet: "prod", Time: now}},
		{"etcd-conflict", etcdConflict()},
		{"cloudmap", cloudMap()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Build(tc.in)
			var table, js bytes.Buffer
			if err := WriteTable(&table, r); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, r); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".txt", table.Bytes())
			golden(t, tc.name+".json", js.Bytes())
		})
	}
}

// golden compares got with testdata/name, or writes it there with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

// TestBuild checks what the golden files make hard to see.
func TestBuild(t *testing.T) {
	r := Build(etcdConflict())
	web := r.Services[1]
	if web.Name != "web" || web.Conflict == nil || web.Conflict.Winner != "c1" || web.Exports[0].Cluster != "c1" || web.Exports[0].Rank != 1 {
		t.Errorf("shop/web = %+v, want c1 first and winning the conflict", web)
	}
	cm := Build(cloudMap()).Services[0]
	if d := cmp.Diff(&Conflict{Winner: "aws", Winners: map[string]string{"PortConflict": "aws", "LabelsConflict": "east"}}, cm.Conflict,
		cmpopts.IgnoreFields(Conflict{}, "Reasons", "Message")); d != "" {
		t.Errorf("shop/web's conflict on Cloud Map (-want +got):\n%s", d)
	}
	if got, want := web.Import.Published, ago(15*time.Second); !got.Equal(want) {
		t.Errorf("shop/web published %s, want the latest endpoints update %s", got, want)
	}
	byName := map[string]LocalImport{}
	for _, i := range r.Local.Imports {
		byName[i.Namespace+"/"+i.Name] = i
	}
	for name, want := range map[string][]string{"shop/web": {}, "data/db": {"ports", "clusters"}, "old/gone": {"withdrawn"}} {
		if diff := cmp.Diff(want, byName[name].Differs); diff != "" {
			t.Errorf("%s differs (-want +got):\n%s", name, diff)
		}
	}
	if got := byName["shop/web"].LastChange; !got.Equal(ago(12 * time.Second)) {
		t.Errorf("shop/web last changed %s, want its latest slice write %s", got, ago(12*time.Second))
	}
	for _, c := range r.Clusters {
		if c.ID == "c1" && (!c.Local || c.Lease == "" || !c.Expires.Equal(now.Add(27*time.Second))) {
			t.Errorf("c1 = %+v, want local, on its lease, expiring in 27s", c)
		}
	}
}

// fakeWatcher delivers a disconnection and then, unless it has no
// snapshot, a full update.
type fakeWatcher struct {
	snap   *Snapshot
	leases []registry.Lease
	closed bool
	// opened is the clusterset it was opened for.
	opened string
}

func (w *fakeWatcher) Watch(ctx context.Context, h registry.Handler) error {
	h.OnConnection(false, errors.New("connection refused"))
	if w.snap != nil {
		h.OnConnection(true, nil)
		h.OnUpdate(registry.Update{Full: true, Exports: w.snap.Exports, Endpoints: w.snap.Endpoints, Clusters: w.snap.Clusters})
		h.OnUpdate(registry.Update{DeletedClusters: []string{"c1"}})
	}
	<-ctx.Done()
	return ctx.Err()
}

func (w *fakeWatcher) Leases(context.Context) ([]registry.Lease, error) { return w.leases, nil }

func (w *fakeWatcher) Close() error {
	w.closed = true
	return nil
}

func localClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, mcsv1beta1.Install, aboutv1beta1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

func property(name, value string) *aboutv1beta1.ClusterProperty {
	return &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: aboutv1beta1.ClusterPropertySpec{Value: value}}
}

// TestCollect reads the clusterset from the local cluster, one snapshot
// from the watcher, its leases and the local objects of one namespace.
func TestCollect(t *testing.T) {
	in := etcdConflict()
	// The fake client keeps managed fields of its own: the objects go
	// without, and the last change is their creation.
	objs := []client.Object{property(aboutv1beta1.ClusterIDName, "c1"), property(aboutv1beta1.ClusterSetIDName, "prod")}
	for i := range in.Local.Exports {
		in.Local.Exports[i].ManagedFields = nil
		objs = append(objs, &in.Local.Exports[i])
	}
	for i := range in.Local.Imports {
		in.Local.Imports[i].ManagedFields = nil
		objs = append(objs, &in.Local.Imports[i])
	}
	for i := range in.Local.Slices {
		in.Local.Slices[i].ManagedFields = nil
		objs = append(objs, &in.Local.Slices[i])
	}
	w := &fakeWatcher{snap: &in.Snapshot, leases: in.Leases}
	r, err := Collect(t.Context(), Options{
		OpenWatcher: func(_ context.Context, cs string) (registry.ReadOnlyWatcher, error) { w.opened = cs; return w, nil },
		Local:       localClient(t, objs...),
		Namespace:   "shop",
		Now:         func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.opened != "prod" || !w.closed {
		t.Errorf("watcher opened for %q, closed %t; want prod, closed", w.opened, w.closed)
	}
	in.Namespace = "shop"
	want := Build(in)
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("Collect() (-want +got):\n%s", diff)
	}
}

func TestCollectErrors(t *testing.T) {
	t.Run("no clusterset", func(t *testing.T) {
		_, err := Collect(t.Context(), Options{Local: localClient(t), OpenWatcher: func(context.Context, string) (registry.ReadOnlyWatcher, error) {
			t.Fatal("watcher opened without a clusterset")
			return nil, nil
		}})
		if err == nil || !strings.Contains(err.Error(), "no clusterset given") {
			t.Errorf("Collect() = %v, want an error about the missing clusterset", err)
		}
	})
	t.Run("registry unreachable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := Collect(ctx, Options{ClusterSet: "prod", OpenWatcher: func(context.Context, string) (registry.ReadOnlyWatcher, error) {
			return &fakeWatcher{}, nil
		}})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("Collect() = %v, want the deadline and the last connection error", err)
		}
	})
	t.Run("other clusterset", func(t *testing.T) {
		r, err := Collect(t.Context(), Options{
			ClusterSet: "staging",
			Local:      localClient(t, property(aboutv1beta1.ClusterIDName, "c1"), property(aboutv1beta1.ClusterSetIDName, "prod")),
			OpenWatcher: func(context.Context, string) (registry.ReadOnlyWatcher, error) {
				return &fakeWatcher{snap: &Snapshot{}}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "clusterset prod, not staging") {
			t.Errorf("warnings %q, want one about the clusterset", r.Warnings)
		}
	})
}

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 45 * time.Second: "45s", 119 * time.Second: "1m59s", 2 * time.Minute: "2m00s", 125 * time.Second: "2m05s",
		62 * time.Minute: "1h02m", 76 * time.Hour: "3d4h", 1499 * time.Millisecond: "1s",
	} {
		if got := span(d); got != want {
			t.Errorf("span(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestRefusedRecordsAreNotMerged: the report merges what every mcsd
// imports. c0, the oldest exporter, has an endpoints record readers refuse:
// none of its records of the Service count (its export would otherwise win
// the type), and the report says why.
func TestRefusedRecordsAreNotMerged(t *testing.T) {
	bad := eps("c0", web, ago(time.Minute), 1, 0)
	bad.Groups[0].AddressType = "IPv5"
	u := registry.Update{
		Full: true,
		Clusters: []registry.Cluster{
			{ID: "c0", Since: ago(time.Hour), TTL: 30 * time.Second},
			{ID: "c1", Since: ago(time.Hour), TTL: 30 * time.Second},
		},
		Exports: []registry.Export{
			{Cluster: "c0", Service: web, Spec: spec(registry.Headless, port("http", 80)), Order: 1},
			{Cluster: "c1", Service: web, Spec: spec(registry.ClusterSetIP, port("http", 80)), Order: 2},
		},
		Endpoints: []registry.Endpoints{bad, eps("c1", web, ago(time.Minute), 2, 0)},
	}
	s := screened(u)
	if len(s.Exports) != 1 || s.Exports[0].Cluster != "c1" || len(s.Endpoints) != 1 || s.Endpoints[0].Cluster != "c1" {
		t.Fatalf("records kept: exports %+v endpoints %+v, want c1's alone", s.Exports, s.Endpoints)
	}
	if len(s.Rejected) != 1 || s.Rejected[0].Record.Cluster != "c0" {
		t.Fatalf("rejected %+v, want c0's endpoints", s.Rejected)
	}
	r := Build(Input{ClusterSet: "prod", Time: now, Snapshot: s})
	if len(r.Services) != 1 || r.Services[0].Import.Type != string(registry.ClusterSetIP) || !cmp.Equal(r.Services[0].Import.Clusters, []string{"c1"}) {
		t.Errorf("services %+v, want web imported from c1 alone, ClusterSetIP", r.Services)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], `cluster "c0" refused`) || !strings.Contains(r.Warnings[0], "IPv5") {
		t.Errorf("warnings %q, want one naming c0's refused record", r.Warnings)
	}
	// In another namespace's report, nothing is said of it.
	if r := Build(Input{ClusterSet: "prod", Namespace: "data", Time: now, Snapshot: s}); len(r.Warnings) != 0 {
		t.Errorf("warnings of namespace data: %q", r.Warnings)
	}
}
