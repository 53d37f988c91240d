package testbed

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/mcsd-io/mcsd/config/crd"
)

// A CRD counts as served only once discovery lists each of its served
// versions with its resource: Established comes earlier, and a client that
// maps the kind in between fails ("unable to retrieve the complete list of
// server APIs").
func TestUndiscoveredVersions(t *testing.T) {
	crds, err := crd.All()
	if err != nil {
		t.Fatal(err)
	}
	// Everything every CRD serves, as discovery lists it once caught up.
	var all []*metav1.APIResourceList
	byGV := map[string]*metav1.APIResourceList{}
	var names []string
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := c.Spec.Group + "/" + v.Name
			l := byGV[gv]
			if l == nil {
				l = &metav1.APIResourceList{GroupVersion: gv}
				byGV[gv] = l
				all = append(all, l)
			}
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: c.Spec.Names.Plural, Kind: c.Spec.Names.Kind})
			names = append(names, gv+"/"+c.Spec.Names.Plural)
		}
	}
	const late = "about.k8s.io/v1beta1"
	if byGV[late] == nil {
		t.Fatalf("no CRD serves %s", late)
	}
	without := func(gv string) []*metav1.APIResourceList {
		var out []*metav1.APIResourceList
		for _, l := range all {
			if l.GroupVersion != gv {
				out = append(out, l)
			}
		}
		return out
	}
	emptied := func(gv string) []*metav1.APIResourceList {
		out := without(gv)
		return append(out, &metav1.APIResourceList{GroupVersion: gv})
	}
	lateNames := func() []string {
		var out []string
		for _, r := range byGV[late].APIResources {
			out = append(out, late+"/"+r.Name)
		}
		return out
	}()
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		want      []string
	}{
		{name: "all listed", resources: all},
		{name: "nothing listed", want: names},
		{name: "one version of a group not listed yet", resources: without(late), want: lateNames},
		{name: "version listed before its resources", resources: emptied(late), want: lateNames},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.resources}}
			got, err := undiscovered(dc, crds)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("undiscovered = %v, want %v", got, want)
			}
		})
	}
}
