package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/mcsd-io/mcsd/internal/testutil/ctrltest"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
)

// reflector returns a reflector of obj's kind whose lists return list;
// listed, it has listed once.
func reflector(t *testing.T, obj, list runtime.Object, listed bool) *toolscache.Reflector {
	t.Helper()
	r := toolscache.NewReflector(ctrltest.ListWatch(list), obj, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), 0)
	if listed {
		ctx, stop := context.WithCancel(t.Context())
		t.Cleanup(stop)
		go r.RunWithContext(ctx)
		poll.Until(t, 10*time.Second, "the reflector listed", func() (bool, string) { return r.LastSyncResourceVersion() != "", "" })
	}
	return r
}

// The error names the kinds that have not listed since their last error,
// with a hint at RBAC only when the API server refused one; with none, it
// says the lists were slow.
func TestListErrorsNameWhatHasNotSynced(t *testing.T) {
	services := reflector(t, &corev1.Service{}, &corev1.ServiceList{}, false)
	slices := reflector(t, &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, true)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", errors.New("no grant"))
	refused := errors.New("connection refused")

	var none listErrors
	if got, want := none.err(time.Second).Error(), "the caches have not synced in 1s: no list or watch failed, they were slow"; got != want {
		t.Errorf("no errors: %q, want %q", got, want)
	}

	var l listErrors
	l.handle(t.Context(), slices, refused) // listed since: synced
	l.handle(t.Context(), services, refused)
	err := l.err(3 * time.Second)
	if got, want := err.Error(), "the caches have not synced in 3s: *v1.Service: connection refused"; got != want {
		t.Errorf("a Service list refused by the network: %q, want %q", got, want)
	}
	l.handle(t.Context(), services, forbidden)
	err = l.err(3 * time.Second)
	if !errors.Is(err, errCacheSync) {
		t.Errorf("%v is not errCacheSync", err)
	}
	for _, want := range []string{"the caches have not synced in 3s (is a grant of mcsd's RBAC missing?): ", "*v1.Service: ", "forbidden"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("a Service list refused by RBAC: %q, want it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "EndpointSlice") {
		t.Errorf("%q names the EndpointSlices, which have listed since their error", err)
	}
}
