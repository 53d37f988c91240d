package core

import (
	"fmt"
	"maps"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// An imported EndpointSlice that someone else edits, or deletes, is made
// whole again, though nothing changed in the registry: a slice whose
// inputs are unchanged is skipped only while mcsd alone wrote it.
func TestEditedSliceIsMended(t *testing.T) {
	ns, c1 := setUpTest(t, "mend")
	c2 := env.Client(t, "c2")
	ips := deployExported(t, c1, fw.App{Namespace: ns, Name: "web", Replicas: 2})
	fromC1 := func(what string) {
		t.Helper()
		poll.Until(t, timeout, what, func() (bool, string) {
			got := importedSlices(t, c2, ns, "web")["c1"]
			states := endpointStates(got)
			ok := maps.Equal(states, allReady(ips))
			for _, sl := range got {
				ok = ok && sl.Annotations[wellknown.AnnotationSliceInputs] != ""
			}
			return ok, fmt.Sprintf("endpoints from c1 %v, want %v", states, allReady(ips))
		})
	}
	fromC1("c1's endpoints in c2, each slice with the digest of its inputs")

	// Someone else takes an endpoint out (the digest stays).
	sl := importedSlices(t, c2, ns, "web")["c1"][0]
	sl.Endpoints = sl.Endpoints[1:]
	if err := c2.Update(t.Context(), &sl, client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	fromC1("the edited slice mended")

	// Someone else deletes it.
	sl = importedSlices(t, c2, ns, "web")["c1"][0]
	if err := c2.Delete(t.Context(), &sl); err != nil {
		t.Fatal(err)
	}
	fromC1("the deleted slice written again")
}
