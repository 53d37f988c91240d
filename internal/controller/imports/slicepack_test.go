package imports

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// addrs are n endpoint addresses, the from-th first, in the order of
// their strings.
func addrs(from, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("10.1.%d.%d", 100+(from+i)/100, 100+(from+i)%100)
	}
	return out
}

func sliceEndpoints(as []string) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, len(as))
	for i, a := range as {
		out[i] = discoveryv1.Endpoint{Addresses: []string{a}}
	}
	slices.SortFunc(out, compareEndpoints)
	return out
}

func heldOf(chunks map[int][]string) map[int]map[string]bool {
	out := map[int]map[string]bool{}
	for c, as := range chunks {
		out[c] = map[string]bool{}
		for _, a := range as {
			out[c][a] = true
		}
	}
	return out
}

func TestPackChunks(t *testing.T) {
	const max = 4
	cat := func(lists ...[]string) []string { return slices.Concat(lists...) }
	tests := []struct {
		name string
		eps  []string
		held map[int][]string
		want map[int][]string
	}{
		{
			name: "new: filled in order",
			eps:  addrs(0, 10),
			want: map[int][]string{0: addrs(0, 4), 1: addrs(4, 4), 2: addrs(8, 2)},
		},
		{
			name: "one added that sorts first: the chunk with room takes it, the others stay",
			eps:  cat([]string{"10.0.0.1"}, addrs(0, 6)),
			held: map[int][]string{0: addrs(0, 4), 1: addrs(4, 2)},
			want: map[int][]string{0: addrs(0, 4), 1: cat([]string{"10.0.0.1"}, addrs(4, 2))},
		},
		{
			name: "one added, every chunk full: a new chunk",
			eps:  cat([]string{"10.0.0.1"}, addrs(0, 8)),
			held: map[int][]string{0: addrs(0, 4), 1: addrs(4, 4)},
			want: map[int][]string{0: addrs(0, 4), 1: addrs(4, 4), 2: {"10.0.0.1"}},
		},
		{
			name: "one removed: its chunk alone changes",
			eps:  cat(addrs(0, 2), addrs(3, 5)),
			held: map[int][]string{0: addrs(0, 4), 1: addrs(4, 4)},
			want: map[int][]string{0: cat(addrs(0, 2), addrs(3, 1)), 1: addrs(4, 4)},
		},
		{
			name: "fewer chunks do: the emptiest goes into the others",
			eps:  cat(addrs(0, 3), addrs(4, 1)),
			held: map[int][]string{0: addrs(0, 4), 1: addrs(4, 4)},
			want: map[int][]string{0: cat(addrs(0, 3), addrs(4, 1))},
		},
		{
			name: "equals: the highest numbered goes",
			eps:  cat(addrs(0, 2), addrs(4, 2)),
			held: map[int][]string{0: addrs(0, 4), 1: addrs(4, 4)},
			want: map[int][]string{0: cat(addrs(0, 2), addrs(4, 2))},
		},
		{
			name: "a chunk in use with room before one held empty, and a free number before a new one",
			eps:  cat(addrs(4, 2), addrs(20, 5)),
			held: map[int][]string{0: addrs(0, 4), 1: addrs(4, 4), 3: addrs(8, 4)},
			want: map[int][]string{1: cat(addrs(4, 2), addrs(20, 2)), 0: addrs(22, 3)},
		},
		{
			name: "a chunk edited past the bound keeps what fits",
			eps:  addrs(0, 6),
			held: map[int][]string{0: addrs(0, 6)},
			want: map[int][]string{0: addrs(0, 4), 1: addrs(4, 2)},
		},
		{
			name: "an endpoint two chunks hold stays in the lower",
			eps:  addrs(0, 6),
			held: map[int][]string{0: addrs(0, 3), 1: addrs(2, 4)},
			want: map[int][]string{0: addrs(0, 3), 1: addrs(3, 3)},
		},
		{
			name: "none",
			held: map[int][]string{0: addrs(0, 4)},
			want: map[int][]string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := packChunks(sliceEndpoints(tc.eps), heldOf(tc.held), max)
			want := map[int][]discoveryv1.Endpoint{}
			for c, as := range tc.want {
				want[c] = sliceEndpoints(as)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("chunks (-want +got):\n%s", d)
			}
		})
	}
}

// largeImport publishes east's web with endpoints at as and reconciles it.
func largeImport(t *testing.T, e *env, as []string) {
	t.Helper()
	exports := []registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80))}
	eps := make([]registry.Endpoint, len(as))
	for i, a := range as {
		eps[i] = ready(a)
	}
	e.publish(exports, endpoints("east", group(discoveryv1.AddressTypeIPv4, []registry.EndpointPort{epPort("http", 8080)}, eps...)))
}

// reconcileRefusingUpdatesOf reconciles web while the API server refuses
// every update of an EndpointSlice to n endpoints, and fails t unless the
// reconcile fails; later reconciles are not refused.
func reconcileRefusingUpdatesOf(t *testing.T, e *env, n int) {
	t.Helper()
	e.updateHook = func(o client.Object) error {
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok && len(sl.Endpoints) == n {
			return apierrors.NewServiceUnavailable("injected")
		}
		return nil
	}
	defer func() { e.updateHook = nil }()
	if _, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "web"}}); err == nil {
		t.Fatalf("reconcile with the updates of a slice to %d endpoints refused: no error", n)
	}
}

// sliceWrites are the EndpointSlice writes among writes.
func sliceWrites(writes []string) []string {
	return slices.DeleteFunc(slices.Clone(writes), func(w string) bool { return !strings.Contains(w, "EndpointSlice") })
}

// TestOneEndpointChangeWritesOneSlice: an endpoint added or removed in a
// cluster with more endpoints than one slice holds changes one slice, not
// every slice after it (the slices are not cut afresh from the sorted
// endpoints at each change).
func TestOneEndpointChangeWritesOneSlice(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	as := addrs(0, 250)
	largeImport(t, e, as)
	e.reconcile("web")
	e.steady("web")

	largeImport(t, e, append([]string{"10.0.0.1"}, as...)) // sorts first
	if w := sliceWrites(e.reconcile("web")); len(w) != 1 || !strings.HasPrefix(w[0], "update") {
		t.Errorf("one endpoint added: slice writes %v, want one update", w)
	}
	largeImport(t, e, as[1:])
	if w := sliceWrites(e.reconcile("web")); len(w) != 2 {
		// The one added and the first of the others gone: their slices.
		t.Errorf("two endpoints removed from two slices: slice writes %v, want two updates", w)
	}
	e.steady("web")
	if d := cmp.Diff(as[1:], addresses(e.slices("web")["east"])); d != "" {
		t.Errorf("addresses (-want +got):\n%s", d)
	}
}

// TestSliceEmptiedIntoOthersOnlyOnceTheyHoldItsEndpoints: endpoints that
// move from a slice emptied into another (the cluster now needs fewer
// slices) are written into that one before theirs goes: when that write
// fails, the old slice stays, and no endpoint is in none.
func TestSliceEmptiedIntoOthersOnlyOnceTheyHoldItsEndpoints(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	as := addrs(0, 150)
	largeImport(t, e, as)
	e.reconcile("web")
	if n := len(e.slices("web")["east"]); n != 2 {
		t.Fatalf("%d slices for 150 endpoints, want 2", n)
	}

	// 50 of the first slice's go: 100 endpoints, one slice.
	left := slices.Concat(as[:50], as[100:])
	largeImport(t, e, left)
	reconcileRefusingUpdatesOf(t, e, 100)
	got := map[string]bool{}
	for _, sl := range e.slices("web")["east"] {
		for _, ep := range sl.Endpoints {
			got[ep.Addresses[0]] = true
		}
	}
	for _, a := range left {
		if !got[a] {
			t.Errorf("endpoint %s in no slice while the slice that takes it could not be written", a)
		}
	}

	e.reconcile("web")
	ss := e.slices("web")["east"]
	if len(ss) != 1 {
		t.Errorf("%d slices for 100 endpoints, want 1", len(ss))
	}
	if d := cmp.Diff(left, addresses(ss)); d != "" {
		t.Errorf("addresses (-want +got):\n%s", d)
	}
	e.steady("web")
}

// TestEndpointMovedBetweenSlicesGainBeforeLose: an endpoint that moves
// from one existing slice to another (its ports changed, so its set did) is
// written into the new one before it leaves the old: when the write that
// adds it fails, the old slice still lists it.
func TestEndpointMovedBetweenSlicesGainBeforeLose(t *testing.T) {
	e := newEnv(t, namespace(testNS))
	exports := []registry.Export{export("east", registry.ClusterSetIP, v4, port("http", corev1.ProtocolTCP, 80), port("metrics", corev1.ProtocolTCP, 9090))}
	httpOnly := []registry.EndpointPort{epPort("http", 8080)}
	both := []registry.EndpointPort{epPort("http", 8080), epPort("metrics", 9090)}
	e.publish(exports, endpoints("east",
		group(discoveryv1.AddressTypeIPv4, httpOnly, ready("10.0.0.1"), ready("10.0.0.2")),
		group(discoveryv1.AddressTypeIPv4, both, ready("10.0.0.3"), ready("10.0.0.4"))))
	e.reconcile("web")
	if n := len(e.slices("web")["east"]); n != 2 {
		t.Fatalf("%d slices for two port lists, want 2", n)
	}

	// 10.0.0.2 now serves metrics too.
	e.publish(exports, endpoints("east",
		group(discoveryv1.AddressTypeIPv4, httpOnly, ready("10.0.0.1")),
		group(discoveryv1.AddressTypeIPv4, both, ready("10.0.0.2"), ready("10.0.0.3"), ready("10.0.0.4"))))
	reconcileRefusingUpdatesOf(t, e, 3)
	if got := addresses(e.slices("web")["east"]); !slices.Contains(got, "10.0.0.2") {
		t.Errorf("10.0.0.2 in no slice while the slice that takes it could not be written: %v", got)
	}

	e.reconcile("web")
	e.steady("web")
	for _, sl := range e.slices("web")["east"] {
		want := []string{"10.0.0.1"}
		if len(sl.Ports) == 2 {
			want = []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}
		}
		if d := cmp.Diff(want, addresses([]discoveryv1.EndpointSlice{sl})); d != "" {
			t.Errorf("slice with ports %v (-want +got):\n%s", portNames(sl.Ports), d)
		}
	}
}
