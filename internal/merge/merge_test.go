package merge

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/conditions"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

const (
	portConflict          = mcsv1beta1.ServiceExportReasonPortConflict
	typeConflict          = mcsv1beta1.ServiceExportReasonTypeConflict
	affinityConflict      = mcsv1beta1.ServiceExportReasonSessionAffinityConflict
	affinityConfConflict  = mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict
	labelsConflict        = mcsv1beta1.ServiceExportReasonLabelsConflict
	annotationsConflict   = mcsv1beta1.ServiceExportReasonAnnotationsConflict
	trafficPolicyConflict = mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict
	distributionConflict  = mcsv1beta1.ServiceExportReasonTrafficDistributionConflict
	ipFamilyConflict      = mcsv1beta1.ServiceExportReasonIPFamilyConflict
)

type reasons = []mcsv1beta1.ServiceExportConditionReason

func ptr[T any](v T) *T { return &v }

var (
	ipv4 = corev1.IPv4Protocol
	ipv6 = corev1.IPv6Protocol
	tcp  = corev1.ProtocolTCP
	udp  = corev1.ProtocolUDP
	sctp = corev1.ProtocolSCTP
)

type option func(*registry.ServiceSpec)

// export builds cluster's export of ns/svc: a ClusterSetIP service with port
// "http" TCP/80 and family IPv4, then opts.
func export(cluster string, order int64, opts ...option) registry.Export {
	e := registry.Export{
		Cluster: cluster,
		Service: registry.ServiceKey{Namespace: "ns", Name: "svc"},
		Order:   order,
		Spec: registry.ServiceSpec{
			Type:       registry.ClusterSetIP,
			Ports:      []registry.Port{{Name: "http", Protocol: tcp, Port: 80}},
			IPFamilies: []corev1.IPFamily{ipv4},
		},
	}
	for _, o := range opts {
		o(&e.Spec)
	}
	return e
}

func ports(ps ...registry.Port) option {
	return func(s *registry.ServiceSpec) { s.Ports = ps }
}

func headless(s *registry.ServiceSpec) { s.Type = registry.Headless }

func clientIP(timeout *int32) option {
	return func(s *registry.ServiceSpec) {
		s.SessionAffinity = corev1.ServiceAffinityClientIP
		if timeout != nil {
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
	}
}

func families(fs ...corev1.IPFamily) option {
	return func(s *registry.ServiceSpec) { s.IPFamilies = fs }
}

func labels(m map[string]string) option {
	return func(s *registry.ServiceSpec) { s.ExportedLabels = m }
}

func annotations(m map[string]string) option {
	return func(s *registry.ServiceSpec) { s.ExportedAnnotations = m }
}

func trafficPolicy(p corev1.ServiceInternalTrafficPolicy) option {
	return func(s *registry.ServiceSpec) { s.InternalTrafficPolicy = &p }
}

func distribution(d string) option {
	return func(s *registry.ServiceSpec) { s.TrafficDistribution = &d }
}

func sp(name string, protocol corev1.Protocol, port int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Protocol: protocol, Port: port}
}

func rp(name string, protocol corev1.Protocol, port int32) registry.Port {
	return registry.Port{Name: name, Protocol: protocol, Port: port}
}

func TestMergeNoExports(t *testing.T) {
	for _, in := range [][]registry.Export{nil, {}} {
		got := Merge(in)
		if diff := cmp.Diff(Result{}, got); diff != "" {
			t.Errorf("Merge(%#v) (-want +got):\n%s", in, diff)
		}
	}
}

func TestMergeSingleExport(t *testing.T) {
	e := export("c1", 7,
		ports(rp("http", tcp, 80), registry.Port{Name: "grpc", Port: 9090, AppProtocol: ptr("kubernetes.io/h2c")}),
		families(ipv6, ipv4),
		labels(map[string]string{"app": "web"}),
		annotations(map[string]string{"note": "x"}),
		distribution("PreferClose"),
	)
	want := Result{
		Spec: mcsv1beta1.ServiceImportSpec{
			Type: mcsv1beta1.ClusterSetIP,
			Ports: []mcsv1beta1.ServicePort{
				sp("http", tcp, 80),
				{Name: "grpc", Protocol: tcp, Port: 9090, AppProtocol: ptr("kubernetes.io/h2c")},
			},
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{ipv6, ipv4},
			InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster),
			TrafficDistribution:   ptr("PreferClose"),
		},
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{"note": "x"},
		Clusters:    []string{"c1"},
		Served:      map[string][]string{"c1": {"http", "grpc"}},
	}
	got := Merge([]registry.Export{e})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Merge (-want +got):\n%s", diff)
	}
	if c := got.Conflict.Condition(); c.Status != metav1.ConditionFalse || c.Reason != "NoConflicts" || c.Message != "" {
		t.Errorf("Condition() = %+v, want False/NoConflicts with no message", c)
	}
}

func TestMergeHeadless(t *testing.T) {
	got := Merge([]registry.Export{export("c1", 1, headless, ports()), export("c2", 2, headless, ports())})
	want := Result{
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:                  mcsv1beta1.Headless,
			Ports:                 []mcsv1beta1.ServicePort{},
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{ipv4},
			InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster),
		},
		Clusters: []string{"c1", "c2"},
		Served:   map[string][]string{"c1": nil, "c2": nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Merge (-want +got):\n%s", diff)
	}
}

// TestMergeFieldConflicts checks every field the oldest export decides: the
// older holder of a value wins, swapping the exports' Order flips the
// winner, and the conflict is raised either way.
func TestMergeFieldConflicts(t *testing.T) {
	tests := []struct {
		name   string
		a, b   []option
		get    func(Result) any
		wantA  any // the result when the export with a is the oldest
		wantB  any
		reason mcsv1beta1.ServiceExportConditionReason
		// note is the message when a wins (c1 holds a, c2 holds b).
		note string
	}{{
		name:   "type",
		a:      nil,
		b:      []option{headless},
		get:    func(r Result) any { return r.Spec.Type },
		wantA:  mcsv1beta1.ClusterSetIP,
		wantB:  mcsv1beta1.Headless,
		reason: typeConflict,
		note:   `type: using "ClusterSetIP" from cluster "c1" (oldest export); cluster "c2" has "Headless"`,
	}, {
		name: "session affinity",
		a:    nil,
		b:    []option{clientIP(ptr[int32](60))},
		get: func(r Result) any {
			return []any{r.Spec.SessionAffinity, r.Spec.SessionAffinityConfig}
		},
		wantA: []any{corev1.ServiceAffinityNone, (*corev1.SessionAffinityConfig)(nil)},
		wantB: []any{corev1.ServiceAffinityClientIP, &corev1.SessionAffinityConfig{
			ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)},
		}},
		reason: affinityConflict,
		note:   `sessionAffinity: using "None" from cluster "c1" (oldest export); cluster "c2" has "ClientIP"`,
	}, {
		name:   "session affinity config",
		a:      []option{clientIP(ptr[int32](60))},
		b:      []option{clientIP(nil)},
		get:    func(r Result) any { return *r.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds },
		wantA:  int32(60),
		wantB:  DefaultClientIPTimeoutSeconds,
		reason: affinityConfConflict,
		note:   `sessionAffinityConfig: using timeoutSeconds 60 from cluster "c1" (oldest export); cluster "c2" has timeoutSeconds 10800`,
	}, {
		name:   "exported labels",
		a:      []option{labels(map[string]string{"app": "web", "tier": "front"})},
		b:      []option{labels(map[string]string{"app": "api"})},
		get:    func(r Result) any { return r.Labels },
		wantA:  map[string]string{"app": "web", "tier": "front"},
		wantB:  map[string]string{"app": "api"},
		reason: labelsConflict,
		note:   `exportedLabels: using {app=web, tier=front} from cluster "c1" (oldest export); cluster "c2" has {app=api}`,
	}, {
		name:   "exported labels against none",
		a:      []option{labels(map[string]string{"app": "web"})},
		b:      nil,
		get:    func(r Result) any { return r.Labels },
		wantA:  map[string]string{"app": "web"},
		wantB:  map[string]string(nil),
		reason: labelsConflict,
		note:   `exportedLabels: using {app=web} from cluster "c1" (oldest export); cluster "c2" has {}`,
	}, {
		name:   "exported annotations",
		a:      []option{annotations(map[string]string{"owner": "a"})},
		b:      []option{annotations(map[string]string{"owner": "b"})},
		get:    func(r Result) any { return r.Annotations },
		wantA:  map[string]string{"owner": "a"},
		wantB:  map[string]string{"owner": "b"},
		reason: annotationsConflict,
		note:   `exportedAnnotations: using {owner=a} from cluster "c1" (oldest export); cluster "c2" has {owner=b}`,
	}, {
		name:   "internal traffic policy",
		a:      []option{trafficPolicy(corev1.ServiceInternalTrafficPolicyLocal)},
		b:      nil, // unset means Cluster
		get:    func(r Result) any { return *r.Spec.InternalTrafficPolicy },
		wantA:  corev1.ServiceInternalTrafficPolicyLocal,
		wantB:  corev1.ServiceInternalTrafficPolicyCluster,
		reason: trafficPolicyConflict,
		note:   `internalTrafficPolicy: using "Local" from cluster "c1" (oldest export); cluster "c2" has "Cluster"`,
	}, {
		name:   "traffic distribution",
		a:      []option{distribution("PreferClose")},
		b:      nil,
		get:    func(r Result) any { return r.Spec.TrafficDistribution },
		wantA:  ptr("PreferClose"),
		wantB:  (*string)(nil),
		reason: distributionConflict,
		note:   `trafficDistribution: using "PreferClose" from cluster "c1" (oldest export); cluster "c2" has unset`,
	}, {
		name:   "ip families disjoint",
		a:      []option{families(ipv4)},
		b:      []option{families(ipv6)},
		get:    func(r Result) any { return r.Spec.IPFamilies },
		wantA:  []corev1.IPFamily{ipv4},
		wantB:  []corev1.IPFamily{ipv6},
		reason: ipFamilyConflict,
		note:   `ipFamilies: using [IPv4] from cluster "c1" (oldest export); cluster "c2" has [IPv6]; IPv4 not exported by every cluster`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, flip := range []bool{false, true} {
				ca, cb := export("c1", 1, tt.a...), export("c2", 2, tt.b...)
				want := tt.wantA
				if flip {
					ca.Order, cb.Order = 2, 1
					want = tt.wantB
				}
				got := Merge([]registry.Export{cb, ca})
				if diff := cmp.Diff(want, tt.get(got)); diff != "" {
					t.Errorf("flip=%v: winning value (-want +got):\n%s", flip, diff)
				}
				if diff := cmp.Diff(reasons{tt.reason}, got.Conflict.Reasons); diff != "" {
					t.Errorf("flip=%v: reasons (-want +got):\n%s", flip, diff)
				}
				if !flip && got.Conflict.Message != tt.note {
					t.Errorf("message:\n got %s\nwant %s", got.Conflict.Message, tt.note)
				}
				if flip && !strings.Contains(got.Conflict.Message, `from cluster "c2" (oldest export); cluster "c1" has`) {
					t.Errorf("flip: message %q does not name c2 as the winner", got.Conflict.Message)
				}
				if c := got.Conflict.Condition(); c.Status != metav1.ConditionTrue || c.Reason != string(tt.reason) {
					t.Errorf("flip=%v: Condition() = %+v", flip, c)
				}
			}
		})
	}
}

// TestMergeEquivalences checks that unset fields equal their Kubernetes
// defaults, and that the result spells the defaults out.
func TestMergeEquivalences(t *testing.T) {
	tests := []struct {
		name string
		a, b []option
		get  func(Result) any
		want any
		// wantFlipped is the result when b is the oldest, if not want.
		wantFlipped any
	}{{
		name: "unset type is ClusterSetIP",
		a:    []option{func(s *registry.ServiceSpec) { s.Type = "" }},
		b:    nil,
		get:  func(r Result) any { return r.Spec.Type },
		want: mcsv1beta1.ClusterSetIP,
	}, {
		name: "unset session affinity is None",
		a:    []option{func(s *registry.ServiceSpec) { s.SessionAffinity = "" }},
		b:    []option{func(s *registry.ServiceSpec) { s.SessionAffinity = corev1.ServiceAffinityNone }},
		get:  func(r Result) any { return r.Spec.SessionAffinity },
		want: corev1.ServiceAffinityNone,
	}, {
		name: "unset ClientIP config is the default timeout",
		a:    []option{clientIP(nil)},
		b:    []option{clientIP(ptr(DefaultClientIPTimeoutSeconds))},
		get:  func(r Result) any { return r.Spec.SessionAffinityConfig },
		want: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(DefaultClientIPTimeoutSeconds)}},
	}, {
		name: "ClientIP config without timeout is the default timeout",
		a: []option{clientIP(nil), func(s *registry.ServiceSpec) {
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{}}
		}},
		b:    []option{clientIP(ptr(DefaultClientIPTimeoutSeconds))},
		get:  func(r Result) any { return *r.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds },
		want: DefaultClientIPTimeoutSeconds,
	}, {
		name: "config ignored without ClientIP affinity",
		a: []option{func(s *registry.ServiceSpec) {
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](5)}}
		}},
		b:    nil,
		get:  func(r Result) any { return r.Spec.SessionAffinityConfig },
		want: (*corev1.SessionAffinityConfig)(nil),
	}, {
		name: "unset internal traffic policy is Cluster",
		a:    nil,
		b:    []option{trafficPolicy(corev1.ServiceInternalTrafficPolicyCluster)},
		get:  func(r Result) any { return r.Spec.InternalTrafficPolicy },
		want: ptr(corev1.ServiceInternalTrafficPolicyCluster),
	}, {
		name: "empty traffic distribution is unset",
		a:    []option{distribution("")},
		b:    nil,
		get:  func(r Result) any { return r.Spec.TrafficDistribution },
		want: (*string)(nil),
	}, {
		name: "empty labels equal no labels",
		a:    []option{labels(map[string]string{})},
		b:    nil,
		get:  func(r Result) any { return r.Labels },
		want: map[string]string(nil),
	}, {
		name: "empty annotations equal no annotations",
		a:    nil,
		b:    []option{annotations(map[string]string{})},
		get:  func(r Result) any { return r.Annotations },
		want: map[string]string(nil),
	}, {
		name: "same families in another order keep the oldest order",
		a:    []option{families(ipv6, ipv4)},
		b:    []option{families(ipv4, ipv6)},
		get:  func(r Result) any { return r.Spec.IPFamilies },
		want: []corev1.IPFamily{ipv6, ipv4},
		// No conflict either way, but the winner's order is used.
		wantFlipped: []corev1.IPFamily{ipv4, ipv6},
	}, {
		name: "a family listed twice counts once",
		a:    []option{families(ipv4, ipv4)},
		b:    nil,
		get:  func(r Result) any { return r.Spec.IPFamilies },
		want: []corev1.IPFamily{ipv4},
	}, {
		name: "unset protocol is TCP",
		a:    []option{ports(registry.Port{Name: "http", Port: 80})},
		b:    nil,
		get:  func(r Result) any { return r.Spec.Ports },
		want: []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
	}, {
		name: "empty appProtocol is unset",
		a:    []option{ports(registry.Port{Name: "http", Protocol: tcp, Port: 80, AppProtocol: ptr("")})},
		b:    nil,
		get:  func(r Result) any { return r.Spec.Ports },
		want: []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, flip := range []bool{false, true} {
				ca, cb := export("c1", 1, tt.a...), export("c2", 2, tt.b...)
				want := tt.want
				if flip {
					ca.Order, cb.Order = 2, 1
					if tt.wantFlipped != nil {
						want = tt.wantFlipped
					}
				}
				got := Merge([]registry.Export{ca, cb})
				if len(got.Conflict.Reasons) != 0 || got.Conflict.Message != "" {
					t.Errorf("flip=%v: conflict %+v, want none", flip, got.Conflict)
				}
				if diff := cmp.Diff(want, tt.get(got)); diff != "" {
					t.Errorf("flip=%v: (-want +got):\n%s", flip, diff)
				}
			}
		})
	}
}

func TestMergePorts(t *testing.T) {
	tests := []struct {
		name       string
		exports    []registry.Export // c1 is the oldest, then c2, c3
		wantPorts  []mcsv1beta1.ServicePort
		wantServed map[string][]string
		wantNote   string // "" for no PortConflict
	}{{
		name: "union by name",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80))),
			export("c2", 2, ports(rp("metrics", tcp, 9090), rp("http", tcp, 80))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80), sp("metrics", tcp, 9090)},
		wantServed: map[string][]string{"c1": {"http"}, "c2": {"http", "metrics"}},
		wantNote:   `ports: cluster "c2" adds "metrics" TCP/9090, which cluster "c1" lacks`,
	}, {
		name: "the same port set in another order: no conflict",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80), rp("sig", sctp, 3868))),
			export("c2", 2, ports(rp("sig", sctp, 3868), rp("http", tcp, 80))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80), sp("sig", sctp, 3868)},
		wantServed: map[string][]string{"c1": {"http", "sig"}, "c2": {"http", "sig"}},
	}, {
		name: "a cluster adds an SCTP port: the union, and a conflict naming it",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80))),
			export("c2", 2, ports(rp("http", tcp, 80), rp("sig", sctp, 3868))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80), sp("sig", sctp, 3868)},
		wantServed: map[string][]string{"c1": {"http"}, "c2": {"http", "sig"}},
		wantNote:   `ports: cluster "c2" adds "sig" SCTP/3868, which cluster "c1" lacks`,
	}, {
		name: "newer clusters lack a port of the oldest",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80), rp("metrics", tcp, 9090))),
			export("c2", 2, ports(rp("http", tcp, 80))),
			export("c3", 3, ports(rp("http", tcp, 80))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80), sp("metrics", tcp, 9090)},
		wantServed: map[string][]string{"c1": {"http", "metrics"}, "c2": {"http"}, "c3": {"http"}},
		wantNote:   `ports: clusters "c2", "c3" lack "metrics" TCP/9090 of cluster "c1"`,
	}, {
		name: "oldest export's order first, then additions in export order",
		exports: []registry.Export{
			export("c1", 1, ports(rp("b", tcp, 2), rp("a", tcp, 1))),
			export("c2", 2, ports(rp("d", tcp, 4), rp("a", tcp, 1), rp("c", tcp, 3))),
			export("c3", 3, ports(rp("e", tcp, 5), rp("c", tcp, 3))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("b", tcp, 2), sp("a", tcp, 1), sp("d", tcp, 4), sp("c", tcp, 3), sp("e", tcp, 5)},
		wantServed: map[string][]string{"c1": {"b", "a"}, "c2": {"a", "d", "c"}, "c3": {"c", "e"}},
		wantNote: `ports: clusters "c2", "c3" lack "b" TCP/2 of cluster "c1". ports: cluster "c3" lacks "a" TCP/1 of cluster "c1". ` +
			`ports: cluster "c2" adds "d" TCP/4, which clusters "c1", "c3" lack. ports: cluster "c2" adds "c" TCP/3, which cluster "c1" lacks. ` +
			`ports: 1 more conflicts`,
	}, {
		name: "same name, other number: older wins, newer does not serve it",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80))),
			export("c2", 2, ports(rp("http", tcp, 8080))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
		wantServed: map[string][]string{"c1": {"http"}, "c2": nil},
		wantNote:   `ports: using "http" TCP/80 from cluster "c1" (oldest export with this port); cluster "c2" has "http" TCP/8080`,
	}, {
		name: "the upstream case: same name, other number and targetPort; only the winner serves it",
		exports: []registry.Export{
			export("c1", 1, ports(rp("tcp", tcp, 42))),
			export("c2", 2, ports(rp("tcp", tcp, 4242))),
			export("c3", 3, ports(rp("tcp", tcp, 42))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("tcp", tcp, 42)},
		wantServed: map[string][]string{"c1": {"tcp"}, "c2": nil, "c3": {"tcp"}},
		wantNote:   `ports: using "tcp" TCP/42 from cluster "c1" (oldest export with this port); cluster "c2" has "tcp" TCP/4242`,
	}, {
		name: "a port lost by number, another served: only the agreeing port",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80), rp("admin", tcp, 90))),
			export("c2", 2, ports(rp("http", tcp, 8080), rp("admin", tcp, 90))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80), sp("admin", tcp, 90)},
		wantServed: map[string][]string{"c1": {"http", "admin"}, "c2": {"admin"}},
		wantNote:   `ports: using "http" TCP/80 from cluster "c1" (oldest export with this port); cluster "c2" has "http" TCP/8080`,
	}, {
		name: "same name, other protocol: newer does not serve it",
		exports: []registry.Export{
			export("c1", 1, ports(rp("dns", udp, 53))),
			export("c2", 2, ports(rp("dns", tcp, 53))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("dns", udp, 53)},
		wantServed: map[string][]string{"c1": {"dns"}, "c2": nil},
		wantNote:   `ports: using "dns" UDP/53 from cluster "c1" (oldest export with this port); cluster "c2" has "dns" TCP/53`,
	}, {
		name: "name collision: the newer port is dropped even where its number is free",
		exports: []registry.Export{
			export("c1", 1, ports(rp("a", tcp, 80), rp("b", tcp, 81))),
			export("c2", 2, ports(rp("a", tcp, 82))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("a", tcp, 80), sp("b", tcp, 81)},
		wantServed: map[string][]string{"c1": {"a", "b"}, "c2": nil},
		wantNote: `ports: using "a" TCP/80 from cluster "c1" (oldest export with this port); cluster "c2" has "a" TCP/82. ` +
			`ports: cluster "c2" lacks "b" TCP/81 of cluster "c1"`,
	}, {
		name: "name matched before protocol and port",
		exports: []registry.Export{
			export("c1", 1, ports(rp("a", tcp, 80), rp("b", tcp, 81))),
			export("c2", 2, ports(rp("a", tcp, 81))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("a", tcp, 80), sp("b", tcp, 81)},
		wantServed: map[string][]string{"c1": {"a", "b"}, "c2": nil},
		wantNote: `ports: using "a" TCP/80 from cluster "c1" (oldest export with this port); cluster "c2" has "a" TCP/81. ` +
			`ports: cluster "c2" lacks "b" TCP/81 of cluster "c1"`,
	}, {
		name: "protocol and port collision: the newer name is dropped, the rest added",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80))),
			export("c2", 2, ports(rp("web", tcp, 80), rp("admin", tcp, 90))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80), sp("admin", tcp, 90)},
		wantServed: map[string][]string{"c1": {"http"}, "c2": {"admin"}},
		wantNote: `ports: using "http" TCP/80 from cluster "c1" (oldest export with this port); cluster "c2" has "web" TCP/80. ` +
			`ports: cluster "c2" adds "admin" TCP/90, which cluster "c1" lacks`,
	}, {
		name: "appProtocol differs: older wins, newer serves the port",
		exports: []registry.Export{
			export("c1", 1, ports(registry.Port{Name: "grpc", Protocol: tcp, Port: 9090, AppProtocol: ptr("kubernetes.io/h2c")})),
			export("c2", 2, ports(rp("grpc", tcp, 9090))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{{Name: "grpc", Protocol: tcp, Port: 9090, AppProtocol: ptr("kubernetes.io/h2c")}},
		wantServed: map[string][]string{"c1": {"grpc"}, "c2": {"grpc"}},
		wantNote:   `ports: using "grpc" TCP/9090 appProtocol "kubernetes.io/h2c" from cluster "c1" (oldest export with this port); cluster "c2" has "grpc" TCP/9090`,
	}, {
		name: "same number on different protocols, SCTP included",
		exports: []registry.Export{
			export("c1", 1, ports(rp("dns", udp, 53), rp("dns-tcp", tcp, 53))),
			export("c2", 2, ports(rp("sig", sctp, 53), rp("dns", udp, 53))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("dns", udp, 53), sp("dns-tcp", tcp, 53), sp("sig", sctp, 53)},
		wantServed: map[string][]string{"c1": {"dns", "dns-tcp"}, "c2": {"dns", "sig"}},
		wantNote: `ports: cluster "c2" lacks "dns-tcp" TCP/53 of cluster "c1". ` +
			`ports: cluster "c2" adds "sig" SCTP/53, which cluster "c1" lacks`,
	}, {
		name: "SCTP port conflicts like any other",
		exports: []registry.Export{
			export("c1", 1, ports(rp("sig", sctp, 3868))),
			export("c2", 2, ports(rp("sig", sctp, 3869))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("sig", sctp, 3868)},
		wantServed: map[string][]string{"c1": {"sig"}, "c2": nil},
		wantNote:   `ports: using "sig" SCTP/3868 from cluster "c1" (oldest export with this port); cluster "c2" has "sig" SCTP/3869`,
	}, {
		name: "one unnamed port everywhere",
		exports: []registry.Export{
			export("c1", 1, ports(rp("", tcp, 80))),
			export("c2", 2, ports(rp("", tcp, 80))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("", tcp, 80)},
		wantServed: map[string][]string{"c1": {""}, "c2": {""}},
	}, {
		name: "unnamed ports with other numbers: older wins, newer serves nothing",
		exports: []registry.Export{
			export("c1", 1, ports(rp("", tcp, 80))),
			export("c2", 2, ports(rp("", tcp, 8080))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("", tcp, 80)},
		wantServed: map[string][]string{"c1": {""}, "c2": nil},
		wantNote:   `ports: using unnamed TCP/80 from cluster "c1" (oldest export with this port); cluster "c2" has unnamed TCP/8080`,
	}, {
		name: "named port next to an older unnamed one is dropped",
		exports: []registry.Export{
			export("c1", 1, ports(rp("", tcp, 80))),
			export("c2", 2, ports(rp("metrics", tcp, 9090))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("", tcp, 80)},
		wantServed: map[string][]string{"c1": {""}, "c2": nil},
		wantNote: `ports: cluster "c2" lacks unnamed TCP/80 of cluster "c1". ` +
			`ports: an unnamed port must be the only port, dropped "metrics" TCP/9090 of cluster "c2"`,
	}, {
		name: "unnamed port next to older named ones is dropped",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80))),
			export("c2", 2, ports(rp("", udp, 5353))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
		wantServed: map[string][]string{"c1": {"http"}, "c2": nil},
		wantNote: `ports: cluster "c2" lacks "http" TCP/80 of cluster "c1". ` +
			`ports: an unnamed port must be the only port, dropped unnamed UDP/5353 of cluster "c2"`,
	}, {
		name: "unnamed port matching a named one by protocol and port",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80))),
			export("c2", 2, ports(rp("", tcp, 80))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
		wantServed: map[string][]string{"c1": {"http"}, "c2": nil},
		wantNote:   `ports: using "http" TCP/80 from cluster "c1" (oldest export with this port); cluster "c2" has unnamed TCP/80`,
	}, {
		name: "oldest export without ports: the next one's ports",
		exports: []registry.Export{
			export("c1", 1, ports()),
			export("c2", 2, ports(rp("http", tcp, 80))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
		wantServed: map[string][]string{"c1": nil, "c2": {"http"}},
		wantNote:   `ports: cluster "c2" adds "http" TCP/80, which cluster "c1" lacks`,
	}, {
		name: "no ports at all",
		exports: []registry.Export{
			export("c1", 1, headless, ports()),
		},
		wantPorts:  []mcsv1beta1.ServicePort{},
		wantServed: map[string][]string{"c1": nil},
	}, {
		name: "several dissenters on one port, capped in the message",
		exports: []registry.Export{
			export("c1", 1, ports(rp("http", tcp, 80))),
			export("c2", 2, ports(rp("http", tcp, 81))),
			export("c3", 3, ports(rp("http", tcp, 82))),
			export("c4", 4, ports(rp("http", tcp, 83))),
			export("c5", 5, ports(rp("http", tcp, 84))),
		},
		wantPorts:  []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
		wantServed: map[string][]string{"c1": {"http"}, "c2": nil, "c3": nil, "c4": nil, "c5": nil},
		wantNote: `ports: using "http" TCP/80 from cluster "c1" (oldest export with this port); ` +
			`cluster "c2" has "http" TCP/81, cluster "c3" has "http" TCP/82, cluster "c4" has "http" TCP/83 and 1 more`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Merge(tt.exports)
			if diff := cmp.Diff(tt.wantPorts, got.Spec.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantServed, got.Served); diff != "" {
				t.Errorf("served (-want +got):\n%s", diff)
			}
			var want reasons
			if tt.wantNote != "" {
				want = reasons{portConflict}
			}
			if diff := cmp.Diff(want, got.Conflict.Reasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			if got.Conflict.Message != tt.wantNote {
				t.Errorf("message:\n got %s\nwant %s", got.Conflict.Message, tt.wantNote)
			}
		})
	}
}

// TestMergePortConflictWinner: PortConflict has a winner only when one
// cluster's ports won every conflict on a value.
func TestMergePortConflictWinner(t *testing.T) {
	tests := []struct {
		name    string
		exports []registry.Export
		want    string // "" for none
		noteHas string // a part of the conflict message
	}{{
		name:    "one port's number: the oldest export with it",
		exports: []registry.Export{export("c1", 1, ports(rp("http", tcp, 80))), export("c2", 2, ports(rp("http", tcp, 8080)))},
		want:    "c1",
	}, {
		name: "a newer cluster's port wins over a newest one",
		exports: []registry.Export{export("c1", 1, ports(rp("http", tcp, 80))), export("c2", 2, ports(rp("http", tcp, 80), rp("grpc", tcp, 9090))),
			export("c3", 3, ports(rp("http", tcp, 80), rp("grpc", tcp, 9091)))},
		want: "c2",
	}, {
		name: "ports of two clusters won",
		exports: []registry.Export{export("c1", 1, ports(rp("http", tcp, 80))), export("c2", 2, ports(rp("http", tcp, 8080), rp("grpc", tcp, 9090))),
			export("c3", 3, ports(rp("http", tcp, 80), rp("grpc", tcp, 9091)))},
	}, {
		name: "a partial export's port, its appProtocol another's: two winners",
		exports: []registry.Export{partial("aws", 1, ports(rp("http", tcp, 80))),
			export("c2", 2, ports(registry.Port{Name: "http", Protocol: tcp, Port: 80, AppProtocol: ptr("grpc")})),
			export("c3", 3, ports(registry.Port{Name: "http", Protocol: tcp, Port: 80, AppProtocol: ptr("h2c")}))},
		noteHas: `from cluster "aws" (oldest export with this port; its appProtocol from cluster "c2")`,
	}, {
		name:    "a port some cluster lacks: no value lost",
		exports: []registry.Export{export("c1", 1, ports(rp("http", tcp, 80))), export("c2", 2, ports(rp("http", tcp, 80), rp("grpc", tcp, 9090)))},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, in := range permutations(tt.exports) {
				c := Merge(in).Conflict
				if len(c.Reasons) == 0 || c.Reasons[0] != portConflict {
					t.Fatalf("reasons %v, want a PortConflict", c.Reasons)
				}
				if got := c.Winners[portConflict]; got != tt.want {
					t.Errorf("PortConflict winner %q, want %q (%s)", got, tt.want, c.Message)
				}
				if !strings.Contains(c.Message, tt.noteHas) {
					t.Errorf("message %q lacks %q", c.Message, tt.noteHas)
				}
			}
		})
	}
}

func TestMergePortNotesCapped(t *testing.T) {
	var older, newer []registry.Port
	for i := range int32(10) {
		older = append(older, rp(fmt.Sprintf("p%d", i), tcp, 1000+i))
		newer = append(newer, rp(fmt.Sprintf("p%d", i), udp, 1000+i))
	}
	got := Merge([]registry.Export{export("c1", 1, ports(older...)), export("c2", 2, ports(newer...))})
	notes := strings.Split(got.Conflict.Message, ". ")
	if len(notes) != maxPortNotes+1 || notes[maxPortNotes] != "ports: 6 more conflicts" {
		t.Errorf("message not capped at %d port notes: %s", maxPortNotes, got.Conflict.Message)
	}
}

// TestMergePrecedence checks that Order decides the oldest export, that
// cluster id breaks ties, and that input order does not matter.
func TestMergePrecedence(t *testing.T) {
	tests := []struct {
		name         string
		exports      []registry.Export
		wantClusters []string
		wantType     mcsv1beta1.ServiceImportType
		wantWinner   string
	}{{
		name:         "lower order wins over lower cluster id",
		exports:      []registry.Export{export("a", 5, headless), export("b", 4)},
		wantClusters: []string{"b", "a"},
		wantType:     mcsv1beta1.ClusterSetIP,
		wantWinner:   "b",
	}, {
		name:         "equal order: lower cluster id wins",
		exports:      []registry.Export{export("b", 3), export("a", 3, headless)},
		wantClusters: []string{"a", "b"},
		wantType:     mcsv1beta1.Headless,
		wantWinner:   "a",
	}, {
		name:         "equal order: ids compare as strings",
		exports:      []registry.Export{export("c2", 0), export("c10", 0, headless)},
		wantClusters: []string{"c10", "c2"},
		wantType:     mcsv1beta1.Headless,
		wantWinner:   "c10",
	}, {
		name:         "negative and large orders",
		exports:      []registry.Export{export("x", 1<<62, headless), export("y", -1), export("z", 0, headless)},
		wantClusters: []string{"y", "z", "x"},
		wantType:     mcsv1beta1.ClusterSetIP,
		wantWinner:   "y",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := Merge(tt.exports)
			if diff := cmp.Diff(tt.wantClusters, first.Clusters); diff != "" {
				t.Errorf("clusters (-want +got):\n%s", diff)
			}
			if first.Spec.Type != tt.wantType {
				t.Errorf("type = %q, want %q", first.Spec.Type, tt.wantType)
			}
			if w := fmt.Sprintf("from cluster %q (oldest export)", tt.wantWinner); !strings.Contains(first.Conflict.Message, w) {
				t.Errorf("message %q does not contain %q", first.Conflict.Message, w)
			}
			for _, p := range permutations(tt.exports) {
				if diff := cmp.Diff(first, Merge(p)); diff != "" {
					t.Errorf("result depends on input order (-first +permuted):\n%s", diff)
				}
			}
		})
	}
}

func TestMergeDuplicateClusterUsesOlderRecord(t *testing.T) {
	got := Merge([]registry.Export{export("c1", 9, headless), export("c2", 5), export("c1", 1)})
	if diff := cmp.Diff([]string{"c1", "c2"}, got.Clusters); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
	if got.Spec.Type != mcsv1beta1.ClusterSetIP || len(got.Conflict.Reasons) != 0 {
		t.Errorf("got type %q and conflict %+v, want the order-1 record of c1 and no conflict", got.Spec.Type, got.Conflict)
	}
}

// TestMergeManyConflicts merges three clusters that disagree on several
// fields at once.
func TestMergeManyConflicts(t *testing.T) {
	exports := []registry.Export{
		export("east", 20, headless,
			ports(rp("http", tcp, 8080), rp("metrics", tcp, 9090)),
			labels(map[string]string{"app": "shop"}),
			trafficPolicy(corev1.ServiceInternalTrafficPolicyLocal),
			families(ipv4)),
		export("west", 10,
			ports(rp("http", tcp, 80)),
			labels(map[string]string{"app": "shop"}),
			families(ipv4, ipv6)),
		export("north", 30, headless,
			ports(rp("http", tcp, 80), rp("grpc", tcp, 9090)),
			labels(map[string]string{"app": "store"}),
			clientIP(nil),
			families(ipv4)),
	}
	want := Result{
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:                  mcsv1beta1.ClusterSetIP,
			Ports:                 []mcsv1beta1.ServicePort{sp("http", tcp, 80), sp("metrics", tcp, 9090)},
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{ipv4, ipv6},
			InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster),
		},
		Labels:   map[string]string{"app": "shop"},
		Clusters: []string{"west", "east", "north"},
		Served: map[string][]string{
			"west":  {"http"},
			"east":  {"metrics"}, // its "http" is 8080, not the import's 80
			"north": {"http"},
		},
		Conflict: Conflict{
			Reasons: reasons{portConflict, typeConflict, affinityConflict, labelsConflict, trafficPolicyConflict, ipFamilyConflict},
			Message: strings.Join([]string{
				`ports: using "http" TCP/80 from cluster "west" (oldest export with this port); cluster "east" has "http" TCP/8080`,
				`ports: using "metrics" TCP/9090 from cluster "east" (oldest export with this port); cluster "north" has "grpc" TCP/9090`,
				`ports: cluster "east" adds "metrics" TCP/9090, which cluster "west" lacks`,
				`type: using "ClusterSetIP" from cluster "west" (oldest export); cluster "east" has "Headless", cluster "north" has "Headless"`,
				`sessionAffinity: using "None" from cluster "west" (oldest export); cluster "north" has "ClientIP"`,
				`exportedLabels: using {app=shop} from cluster "west" (oldest export); cluster "north" has {app=store}`,
				`internalTrafficPolicy: using "Cluster" from cluster "west" (oldest export); cluster "east" has "Local"`,
				`ipFamilies: using [IPv4, IPv6] from cluster "west" (oldest export); cluster "east" has [IPv4], cluster "north" has [IPv4]; IPv6 not exported by every cluster`,
			}, ". "),
			Winners: map[mcsv1beta1.ServiceExportConditionReason]string{typeConflict: "west", affinityConflict: "west",
				labelsConflict: "west", trafficPolicyConflict: "west", ipFamilyConflict: "west"},
		},
	}
	for _, p := range permutations(exports) {
		got := Merge(p)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Merge (-want +got):\n%s", diff)
		}
	}
	c := Merge(exports).Conflict.Condition()
	wantCond := metav1.Condition{
		Type:    "Conflict",
		Status:  metav1.ConditionTrue,
		Reason:  "PortConflict,TypeConflict,SessionAffinityConflict,LabelsConflict,InternalTrafficPolicyConflict,IPFamilyConflict",
		Message: want.Conflict.Message,
	}
	if diff := cmp.Diff(wantCond, c); diff != "" {
		t.Errorf("Condition() (-want +got):\n%s", diff)
	}
}

func TestMergeAllReasonsInOrder(t *testing.T) {
	got := Merge([]registry.Export{
		export("c1", 1, clientIP(ptr[int32](10))),
		export("c2", 2, headless, clientIP(ptr[int32](20)),
			ports(rp("http", udp, 80)),
			labels(map[string]string{"a": "b"}),
			annotations(map[string]string{"a": "b"}),
			trafficPolicy(corev1.ServiceInternalTrafficPolicyLocal),
			distribution("PreferClose"),
			families(ipv6)),
		export("c3", 3, func(s *registry.ServiceSpec) { s.SessionAffinity = corev1.ServiceAffinityNone }),
	})
	if diff := cmp.Diff(conditions.ConflictReasons, got.Conflict.Reasons); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
	want := "PortConflict,TypeConflict,SessionAffinityConflict,SessionAffinityConfigConflict,LabelsConflict," +
		"AnnotationsConflict,InternalTrafficPolicyConflict,TrafficDistributionConflict,IPFamilyConflict"
	if r := got.Conflict.Reason(); r != want {
		t.Errorf("Reason() = %s, want %s", r, want)
	}
	// The config of c3 (affinity None) is not compared: only c2 dissents.
	if n := `sessionAffinityConfig: using timeoutSeconds 10 from cluster "c1" (oldest export); cluster "c2" has timeoutSeconds 20.`; !strings.Contains(got.Conflict.Message, n) {
		t.Errorf("message %q does not contain %q", got.Conflict.Message, n)
	}
}

func TestMergeMessageBounded(t *testing.T) {
	long := strings.Repeat("v", 5000)
	var exports []registry.Export
	for i := range 50 {
		id := fmt.Sprintf("cluster-%02d-%s", i, strings.Repeat("x", 200))
		opts := []option{
			labels(map[string]string{"k": fmt.Sprint(i, long)}),
			annotations(map[string]string{"k": fmt.Sprint(i, long)}),
			distribution(fmt.Sprint(i, long)),
			trafficPolicy(corev1.ServiceInternalTrafficPolicy(fmt.Sprint(i, long))),
		}
		var ps []registry.Port
		for j := range int32(20) {
			ps = append(ps, rp(fmt.Sprintf("p%d", j), tcp, int32(i)*100+j))
		}
		opts = append(opts, ports(ps...))
		if i%2 == 1 {
			opts = append(opts, headless, clientIP(nil), families(ipv6))
		}
		exports = append(exports, export(id, int64(i), opts...))
	}
	got := Merge(exports)
	t.Logf("%d characters: %s", utf8.RuneCountInString(got.Conflict.Message), got.Conflict.Message)
	if len(got.Conflict.Reasons) != len(conditions.ConflictReasons)-1 { // all but SessionAffinityConfigConflict
		t.Errorf("reasons = %v", got.Conflict.Reasons)
	}
	if n := utf8.RuneCountInString(got.Conflict.Message); n > maxMessageLen {
		t.Errorf("message is %d characters long, want at most %d", n, maxMessageLen)
	}
	if !strings.Contains(got.Conflict.Message, " and 46 more") {
		t.Errorf("message does not cap the dissenting clusters: %s", got.Conflict.Message)
	}
	if len(got.Spec.Ports) != 20 || len(got.Clusters) != 50 {
		t.Errorf("got %d ports and %d clusters, want 20 and 50", len(got.Spec.Ports), len(got.Clusters))
	}
}

func TestMergeDoesNotMutateOrAliasInput(t *testing.T) {
	build := func() []registry.Export {
		return []registry.Export{
			export("c2", 2, headless, ports(rp("http", tcp, 81), rp("b", udp, 53)), families(ipv4, ipv6)),
			export("c1", 1,
				ports(registry.Port{Name: "http", Port: 80, AppProtocol: ptr("h2c")}, registry.Port{Name: "x", Protocol: sctp, Port: 1, AppProtocol: ptr("")}),
				clientIP(ptr[int32](30)),
				families(ipv6, ipv4, ipv6),
				labels(map[string]string{"a": "1"}),
				annotations(map[string]string{"b": "2"}),
				trafficPolicy(corev1.ServiceInternalTrafficPolicyLocal),
				distribution("PreferClose")),
		}
	}
	in := build()
	got := Merge(in)
	if diff := cmp.Diff(build(), in); diff != "" {
		t.Fatalf("Merge changed its input (-before +after):\n%s", diff)
	}

	// Writing through everything the result holds must not reach the input.
	got.Labels["a"] = "changed"
	got.Annotations["b"] = "changed"
	got.Spec.Ports[0].Name = "changed"
	*got.Spec.Ports[0].AppProtocol = "changed"
	*got.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = 1
	*got.Spec.InternalTrafficPolicy = "changed"
	*got.Spec.TrafficDistribution = "changed"
	got.Spec.IPFamilies[0] = "changed"
	got.Clusters[0] = "changed"
	got.Served["c1"][0] = "changed"
	if diff := cmp.Diff(build(), in); diff != "" {
		t.Errorf("result aliases the input (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(Merge(build()), Merge(in)); diff != "" {
		t.Errorf("merging again gives another result (-fresh +again):\n%s", diff)
	}
}

func TestConflictCondition(t *testing.T) {
	tests := []struct {
		c    Conflict
		want metav1.Condition
	}{{
		c:    Conflict{},
		want: metav1.Condition{Type: "Conflict", Status: metav1.ConditionFalse, Reason: "NoConflicts"},
	}, {
		c:    Conflict{Reasons: reasons{ipFamilyConflict}, Message: "m"},
		want: metav1.Condition{Type: "Conflict", Status: metav1.ConditionTrue, Reason: "IPFamilyConflict", Message: "m"},
	}, {
		c:    Conflict{Reasons: reasons{portConflict, typeConflict}, Message: "m"},
		want: metav1.Condition{Type: "Conflict", Status: metav1.ConditionTrue, Reason: "PortConflict,TypeConflict", Message: "m"},
	}}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, tt.c.Condition()); diff != "" {
			t.Errorf("%+v.Condition() (-want +got):\n%s", tt.c, diff)
		}
	}
}

func TestCapLen(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "ab…"},
		{"ééééé", 4, "ééé…"},
		{"", 1, ""},
	}
	for _, tt := range tests {
		if got := conditions.Cap(tt.s, tt.n); got != tt.want {
			t.Errorf("conditions.Cap(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

// permutations returns every ordering of es (for the few exports tests use).
func permutations(es []registry.Export) [][]registry.Export {
	if len(es) <= 1 {
		return [][]registry.Export{append([]registry.Export(nil), es...)}
	}
	var out [][]registry.Export
	for i := range es {
		rest := append(append([]registry.Export(nil), es[:i]...), es[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]registry.Export{es[i]}, p...))
		}
	}
	return out
}

// partial is the export of a writer that records the type and ports alone
// (the AWS Cloud Map MCS controller, read by the Cloud Map backend).
func partial(cluster string, order int64, opts ...option) registry.Export {
	e := export(cluster, order, append([]option{families()}, opts...)...)
	e.Partial, e.WrittenBy = true, "aws-cloud-map-mcs-controller-for-k8s"
	return e
}

// TestMergePartialExport: what a partial export does not carry is unknown,
// not different: it neither conflicts nor wins, in either order; what it
// carries (type, ports but their appProtocol) is compared as any export's.
func TestMergePartialExport(t *testing.T) {
	app := registry.Port{Name: "http", Protocol: tcp, Port: 80, AppProtocol: ptr("kubernetes.io/h2c")}
	full := []option{ports(app), clientIP(ptr[int32](60)), labels(map[string]string{"tier": "web"}),
		trafficPolicy(corev1.ServiceInternalTrafficPolicyLocal), distribution("PreferClose")}
	wantFull := mcsv1beta1.ServiceImportSpec{
		Type:                  mcsv1beta1.ClusterSetIP,
		Ports:                 []mcsv1beta1.ServicePort{{Name: "http", Protocol: tcp, Port: 80, AppProtocol: ptr("kubernetes.io/h2c")}},
		SessionAffinity:       corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}},
		IPFamilies:            []corev1.IPFamily{ipv4},
		InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyLocal),
		TrafficDistribution:   ptr("PreferClose"),
	}
	tests := []struct {
		name       string
		exports    []registry.Export
		want       mcsv1beta1.ServiceImportSpec
		wantLabels map[string]string
		reasons    reasons
		// winners: of each reason but ports, the cluster whose value is used
		winners map[mcsv1beta1.ServiceExportConditionReason]string
		served  map[string][]string
		noteHas string // a part of the conflict message
	}{{
		name:       "the partial export oldest: the other's fields, no conflict",
		exports:    []registry.Export{partial("aws", 1), export("c2", 2, full...)},
		want:       wantFull,
		wantLabels: map[string]string{"tier": "web"},
		served:     map[string][]string{"aws": {"http"}, "c2": {"http"}},
	}, {
		name:       "the partial export newest: no conflict",
		exports:    []registry.Export{export("c1", 1, full...), partial("aws", 2)},
		want:       wantFull,
		wantLabels: map[string]string{"tier": "web"},
		served:     map[string][]string{"aws": {"http"}, "c1": {"http"}},
	}, {
		name:    "partial exports alone: the defaults, no conflict",
		exports: []registry.Export{partial("aws1", 1), partial("aws2", 2)},
		want: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
			SessionAffinity: corev1.ServiceAffinityNone, InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster)},
		served: map[string][]string{"aws1": {"http"}, "aws2": {"http"}},
	}, {
		name:    "its port's number still conflicts",
		exports: []registry.Export{partial("aws", 1, ports(rp("http", tcp, 8080))), export("c2", 2, ports(app))},
		want: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{sp("http", tcp, 8080)},
			SessionAffinity: corev1.ServiceAffinityNone, IPFamilies: []corev1.IPFamily{ipv4}, InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster)},
		reasons: reasons{portConflict},
		winners: map[mcsv1beta1.ServiceExportConditionReason]string{portConflict: "aws"},
		served:  map[string][]string{"aws": {"http"}, "c2": nil},
	}, {
		name:    "its type still conflicts",
		exports: []registry.Export{partial("aws", 1, headless), export("c2", 2)},
		want: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
			SessionAffinity: corev1.ServiceAffinityNone, IPFamilies: []corev1.IPFamily{ipv4}, InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster)},
		reasons: reasons{typeConflict},
		winners: map[mcsv1beta1.ServiceExportConditionReason]string{typeConflict: "aws"},
		served:  map[string][]string{"aws": {"http"}, "c2": {"http"}},
	}, {
		name:    "the exports that carry a field still conflict on it",
		exports: []registry.Export{partial("aws", 1), export("c2", 2, families(ipv6)), export("c3", 3, ports(app))},
		want: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
			SessionAffinity: corev1.ServiceAffinityNone, IPFamilies: []corev1.IPFamily{ipv6}, InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster)},
		reasons: reasons{portConflict, ipFamilyConflict},
		winners: map[mcsv1beta1.ServiceExportConditionReason]string{portConflict: "aws", ipFamilyConflict: "c2"},
		served:  map[string][]string{"aws": {"http"}, "c2": {"http"}, "c3": {"http"}},
	}, {
		name: "the oldest export that carries a field wins it, not the partial oldest",
		exports: []registry.Export{partial("aws", 1), export("c2", 2, labels(map[string]string{"tier": "web"})),
			export("c3", 3, labels(map[string]string{"tier": "api"}))},
		want: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
			SessionAffinity: corev1.ServiceAffinityNone, IPFamilies: []corev1.IPFamily{ipv4}, InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster)},
		wantLabels: map[string]string{"tier": "web"},
		reasons:    reasons{labelsConflict},
		winners:    map[mcsv1beta1.ServiceExportConditionReason]string{labelsConflict: "c2"},
		served:     map[string][]string{"aws": {"http"}, "c2": {"http"}, "c3": {"http"}},
		noteHas:    `exportedLabels: using {tier=web} from cluster "c2" (oldest export that carries it)`,
	}, {
		name: "a newer partial export left out: the oldest export wins as such",
		exports: []registry.Export{export("c1", 1, labels(map[string]string{"tier": "web"})), partial("aws", 2),
			export("c3", 3, labels(map[string]string{"tier": "api"}))},
		want: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{sp("http", tcp, 80)},
			SessionAffinity: corev1.ServiceAffinityNone, IPFamilies: []corev1.IPFamily{ipv4}, InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster)},
		wantLabels: map[string]string{"tier": "web"},
		reasons:    reasons{labelsConflict},
		winners:    map[mcsv1beta1.ServiceExportConditionReason]string{labelsConflict: "c1"},
		served:     map[string][]string{"aws": {"http"}, "c1": {"http"}, "c3": {"http"}},
		noteHas:    `exportedLabels: using {tier=web} from cluster "c1" (oldest export);`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, in := range permutations(tt.exports) {
				got := Merge(in)
				if d := cmp.Diff(tt.want, got.Spec); d != "" {
					t.Errorf("spec (-want +got):\n%s", d)
				}
				if d := cmp.Diff(tt.wantLabels, got.Labels); d != "" {
					t.Errorf("labels (-want +got):\n%s", d)
				}
				if d := cmp.Diff(tt.reasons, got.Conflict.Reasons); d != "" {
					t.Errorf("conflict reasons (-want +got):\n%s\nmessage: %s", d, got.Conflict.Message)
				}
				if d := cmp.Diff(tt.winners, got.Conflict.Winners); d != "" {
					t.Errorf("conflict winners (-want +got):\n%s", d)
				}
				if !strings.Contains(got.Conflict.Message, tt.noteHas) {
					t.Errorf("conflict message %q lacks %q", got.Conflict.Message, tt.noteHas)
				}
				if d := cmp.Diff(tt.served, got.Served); d != "" {
					t.Errorf("served (-want +got):\n%s", d)
				}
			}
		})
	}
}

// TestMergeIPFamilies: a conflict only when some export lacks a family of
// the import (the oldest export's), whose traffic then reaches only some
// clusters; an export with a family more conflicts with nothing.
func TestMergeIPFamilies(t *testing.T) {
	tests := []struct {
		name    string
		exports []registry.Export
		want    []corev1.IPFamily
		note    string // "" for no conflict
	}{{
		name:    "dual-stack oldest, single-stack newer: IPv6 reaches one cluster",
		exports: []registry.Export{export("c1", 1, families(ipv6, ipv4)), export("c2", 2, families(ipv4))},
		want:    []corev1.IPFamily{ipv6, ipv4},
		note:    `ipFamilies: using [IPv6, IPv4] from cluster "c1" (oldest export); cluster "c2" has [IPv4]; IPv6 not exported by every cluster`,
	}, {
		name:    "single-stack oldest, dual-stack newer: IPv4 reaches both",
		exports: []registry.Export{export("c1", 1, families(ipv4)), export("c2", 2, families(ipv4, ipv6))},
		want:    []corev1.IPFamily{ipv4},
	}, {
		name:    "a third cluster lacking the import's family",
		exports: []registry.Export{export("c1", 1, families(ipv4)), export("c2", 2, families(ipv4, ipv6)), export("c3", 3, families(ipv6))},
		want:    []corev1.IPFamily{ipv4},
		note:    `ipFamilies: using [IPv4] from cluster "c1" (oldest export); cluster "c3" has [IPv6]; IPv4 not exported by every cluster`,
	}, {
		name:    "an export without families says nothing of them",
		exports: []registry.Export{export("c1", 1, families()), export("c2", 2, families(ipv4)), export("c3", 3, families(ipv6))},
		want:    []corev1.IPFamily{ipv4},
		note:    `ipFamilies: using [IPv4] from cluster "c2" (oldest export that carries it); cluster "c3" has [IPv6]; IPv4 not exported by every cluster`,
	}, {
		name:    "a partial export's families (its endpoints') count",
		exports: []registry.Export{partial("aws", 1, families(ipv4)), export("c2", 2, families(ipv6))},
		want:    []corev1.IPFamily{ipv4},
		note:    `ipFamilies: using [IPv4] from cluster "aws" (oldest export); cluster "c2" has [IPv6]; IPv4 not exported by every cluster`,
	}, {
		name:    "a partial export's families, the others dual-stack",
		exports: []registry.Export{partial("aws", 1, families(ipv4)), export("c2", 2, families(ipv4, ipv6))},
		want:    []corev1.IPFamily{ipv4},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Merge(tt.exports)
			if d := cmp.Diff(tt.want, got.Spec.IPFamilies); d != "" {
				t.Errorf("families (-want +got):\n%s", d)
			}
			var wantReasons reasons
			if tt.note != "" {
				wantReasons = reasons{ipFamilyConflict}
			}
			if d := cmp.Diff(wantReasons, got.Conflict.Reasons); d != "" || got.Conflict.Message != tt.note {
				t.Errorf("reasons (-want +got):\n%s\nmessage %q, want %q", d, got.Conflict.Message, tt.note)
			}
		})
	}
}
