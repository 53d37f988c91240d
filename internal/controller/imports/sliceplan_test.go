package imports

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/topology"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Every field of a cluster's endpoints, and every input of the import that
// clusterSlices reads, changes the digest of that cluster's slices; another
// cluster's endpoints do not.
func TestSliceInputsCoverEveryInput(t *testing.T) {
	const c = "c001"
	base, _, _ := importFromClusters(3)
	want := sliceInputs(base, c)
	check := func(what string, change func(s *scope)) {
		t.Helper()
		s, _, _ := importFromClusters(3)
		change(s)
		if got := sliceInputs(s, c); got == want {
			t.Errorf("%s: the digest of %s's slices did not change", what, c)
		}
	}
	// Each field of c's first group, endpoint and port (a field added to
	// these types must be added to the digest too).
	group := func(s *scope, cluster string) *registry.EndpointGroup {
		e := s.endpoints[cluster]
		g := e.Groups[0]
		g.Endpoints, g.Ports = slices.Clone(g.Endpoints), slices.Clone(g.Ports)
		e.Groups = []registry.EndpointGroup{g}
		s.endpoints[cluster] = e
		return &e.Groups[0]
	}
	fields := map[string]func(*registry.EndpointGroup) reflect.Value{
		"EndpointGroup": func(g *registry.EndpointGroup) reflect.Value { return reflect.ValueOf(g).Elem() },
		"Endpoint":      func(g *registry.EndpointGroup) reflect.Value { return reflect.ValueOf(&g.Endpoints[0]).Elem() },
		"EndpointPort":  func(g *registry.EndpointGroup) reflect.Value { return reflect.ValueOf(&g.Ports[0]).Elem() },
	}
	for typ, of := range fields {
		n := of(group(base, c)).NumField()
		for i := range n {
			name := typ + "." + of(group(base, c)).Type().Field(i).Name
			check(name, func(s *scope) { changeField(t, name, of(group(s, c)).Field(i)) })
		}
	}
	check("this cluster", func(s *scope) { s.localCluster = c })
	check("the import's type", func(s *scope) { s.res.Spec.Type = mcsv1beta1.Headless })
	check("the import's ports", func(s *scope) {
		s.res.Spec.Ports = append(slices.Clone(s.res.Spec.Ports), mcsv1beta1.ServicePort{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443})
	})
	check("the import's families", func(s *scope) {
		s.res.Spec.IPFamilies = append(slices.Clone(s.res.Spec.IPFamilies), corev1.IPv6Protocol)
	})
	check("the ports the cluster serves", func(s *scope) {
		s.res.Served = maps.Clone(s.res.Served)
		s.res.Served[c] = nil
	})
	check("the hints", func(s *scope) {
		in := topology.Input{Preference: topology.PreferSameCluster, LocalCluster: s.localCluster,
			LocalZones: []string{"z1"}, Endpoints: map[string][]registry.Endpoint{}}
		for cluster, e := range s.endpoints {
			in.Endpoints[cluster] = e.Groups[0].Endpoints
		}
		if s.hints = topology.Plan(in); s.hints.Condition == nil || s.hints.Condition.Status != metav1.ConditionTrue {
			t.Fatalf("no hints planned: %+v", s.hints.Condition)
		}
	})
	check("the Service's name", func(s *scope) { s.key.Name = "other" })

	s, _, _ := importFromClusters(3)
	group(s, "c002").Endpoints[0].Ready = false
	if got := sliceInputs(s, c); got != want {
		t.Errorf("another cluster's endpoints changed the digest of %s's slices", c)
	}
}

// changeField sets v, a field, to another value.
func changeField(t *testing.T, name string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int32:
		v.SetInt(v.Int() + 1)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	default:
		t.Fatalf("%s: a field of kind %s the test cannot change", name, v.Kind())
	}
}

// planSlices builds and compares the slices of the clusters whose inputs
// changed, and of those whose slices someone else wrote or deleted; it
// leaves the others alone, and writes no slice for a stale digest alone.
func TestPlanSlicesSkipsUnchangedClusters(t *testing.T) {
	s, _, flip := importFromClusters(3) // flip changes c002's endpoints
	written := func(sl *discoveryv1.EndpointSlice) discoveryv1.EndpointSlice {
		out := *sl.DeepCopy()
		out.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: wellknown.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}
		return out
	}
	var existing []discoveryv1.EndpointSlice
	for _, sl := range planSlices(s, nil).create {
		existing = append(existing, written(sl))
	}
	of := func(cluster string) int {
		return slices.IndexFunc(existing, func(sl discoveryv1.EndpointSlice) bool {
			return sl.Labels[mcsv1beta1.LabelSourceCluster] == cluster
		})
	}
	writes := func(p slicePlan) int {
		return len(p.create) + len(p.grow) + len(p.update) + len(p.remove) + len(p.replace)
	}
	updates := func(p slicePlan) int { return len(p.grow) + len(p.update) }

	if p := planSlices(s, existing); len(p.built) != 0 || writes(p) != 0 {
		t.Errorf("nothing changed: built %v, %d writes; want none", p.built, writes(p))
	}

	flip()
	if p := planSlices(s, existing); !slices.Equal(p.built, []string{"c002"}) || updates(p) != 1 || writes(p) != 1 {
		t.Errorf("c002 changed: built %v, %d writes; want c002's slice alone updated", p.built, writes(p))
	}

	// Someone else took an endpoint out of c000's slice.
	edited := &existing[of("c000")]
	edited.Endpoints = edited.Endpoints[1:]
	edited.ManagedFields = append(edited.ManagedFields, metav1.ManagedFieldsEntry{Manager: "someone-else", Operation: metav1.ManagedFieldsOperationUpdate})
	if p := planSlices(s, existing); !slices.Equal(p.built, []string{"c000"}) || updates(p) != 1 || len(edited.Endpoints) != 10 {
		t.Errorf("c000's slice edited: built %v, %d writes, %d endpoints; want it mended", p.built, writes(p), len(edited.Endpoints))
	}
	edited.ManagedFields = edited.ManagedFields[:1]

	// Someone else replaced it with an edited copy: one field manager,
	// not mcsd's.
	edited.Endpoints = edited.Endpoints[1:]
	edited.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate}}
	if p := planSlices(s, existing); !slices.Equal(p.built, []string{"c000"}) || updates(p) != 1 || len(edited.Endpoints) != 10 {
		t.Errorf("c000's slice replaced: built %v, %d writes, %d endpoints; want it mended", p.built, writes(p), len(edited.Endpoints))
	}
	edited.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: wellknown.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}

	// Someone else deleted c001's slice.
	gone := existing[of("c001")]
	existing = slices.Delete(existing, of("c001"), of("c001")+1)
	if p := planSlices(s, existing); !slices.Equal(p.built, []string{"c001"}) || len(p.create) != 1 || writes(p) != 1 {
		t.Errorf("c001's slice deleted: built %v, %d writes; want it created", p.built, writes(p))
	}
	existing = append(existing, gone)

	// A digest that is stale while the content is right (a slice of an
	// mcsd before digests): compared, not written.
	stale := &existing[of("c001")]
	stale.Annotations = maps.Clone(stale.Annotations)
	stale.Annotations[wellknown.AnnotationSliceInputs] = "old.1"
	if p := planSlices(s, existing); !slices.Equal(p.built, []string{"c001"}) || writes(p) != 0 {
		t.Errorf("c001's digest stale: built %v, %d writes; want it compared, not written", p.built, writes(p))
	}
}

// Slices written while the API server dropped node hints carry the digest
// of the hints they lack: they are left alone while it drops them, and
// built and written again once it keeps them; a slice that has its node
// hints is as wanted either way.
func TestPlanSlicesNodeHintsDropped(t *testing.T) {
	s, _, _ := importFromClusters(2)
	in := topology.Input{TrafficDistribution: corev1.ServiceTrafficDistributionPreferSameNode, LocalCluster: s.localCluster,
		Endpoints: map[string][]registry.Endpoint{}}
	for cluster, e := range s.endpoints {
		g := e.Groups[0]
		g.Endpoints = slices.Clone(g.Endpoints)
		for i := range g.Endpoints {
			g.Endpoints[i].Zone, g.Endpoints[i].NodeName = "z1", cluster+"-n1"
		}
		e.Groups = []registry.EndpointGroup{g}
		s.endpoints[cluster] = e
		in.Endpoints[cluster] = g.Endpoints
	}
	if s.hints = topology.Plan(in); !s.hints.Nodes() {
		t.Fatalf("no node hints planned: %+v", s.hints.Condition)
	}
	writes := func(p slicePlan) int {
		return len(p.create) + len(p.grow) + len(p.update) + len(p.remove) + len(p.replace)
	}
	updates := func(p slicePlan) int { return len(p.grow) + len(p.update) }
	var kept, dropped []discoveryv1.EndpointSlice
	for _, sl := range planSlices(s, nil).create {
		w := *sl.DeepCopy()
		w.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: wellknown.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}
		kept = append(kept, w)
		w = *w.DeepCopy()
		w.Endpoints = withoutNodeHints(w.Endpoints)
		dropped = append(dropped, w)
	}

	s.nodeHintsDropped = true
	if p := planSlices(s, dropped); writes(p) != 0 {
		t.Errorf("the server drops node hints: %d writes of slices without them, want none", writes(p))
	}
	if p := planSlices(s, kept); writes(p) != 0 {
		t.Errorf("the server drops node hints: %d writes of slices that have them, want none", writes(p))
	}
	s.nodeHintsDropped = false
	if p := planSlices(s, dropped); updates(p) != len(dropped) || writes(p) != len(dropped) {
		t.Errorf("the server keeps node hints: %d updates (%d writes) of the slices without them, want %d", updates(p), writes(p), len(dropped))
	}
	if p := planSlices(s, kept); writes(p) != 0 {
		t.Errorf("the server keeps node hints: %d writes of slices that have them, want none", writes(p))
	}
}
