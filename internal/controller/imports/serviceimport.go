package imports

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
)

// reconcileImport creates or updates the ServiceImport's labels, annotations
// and spec, writing only when they differ from the desired ones, and returns
// the ServiceImport as it now is (nil when it could not be created). It
// reads s and writes none of it: it runs beside reconcileEndpointSlices.
func (r *Reconciler) reconcileImport(ctx context.Context, s *scope) (*mcsv1beta1.ServiceImport, error) {
	desired := desiredImport(s)
	if s.si == nil {
		err := r.Client.Create(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			// One the cache has not seen yet (an API server restarted
			// under the controller leaves its watches behind for a while):
			// looked at again soon, not retried with the errors' backoff.
			ctrl.LoggerFrom(ctx).V(1).Info("ServiceImport exists but is not in the cache yet")
			r.unseen.add(client.ObjectKeyFromObject(desired))
			return nil, errImportBehind
		}
		if err != nil {
			return nil, fmt.Errorf("create ServiceImport: %w", err)
		}
		r.unseen.add(client.ObjectKeyFromObject(desired))
		ctrl.LoggerFrom(ctx).Info("Created ServiceImport", "type", desired.Spec.Type, "clusters", s.res.Clusters)
		return desired, nil
	}
	if importUpToDate(s.si, desired) {
		return s.si, nil
	}
	if r.echoes.Behind(ctx, s.si) {
		// The cache shows the ServiceImport older than this controller's
		// last write of it (its status, most often): an update made from
		// it would conflict.
		return s.si, errImportBehind
	}
	if old := s.si.Annotations[wellknown.AnnotationLegacyDerivedService]; old != "" {
		// Written by an older mcsd; the update below replaces it with the
		// standard annotation, keeping the import and its derived Service.
		ctrl.LoggerFrom(ctx).Info("Replacing the legacy derived-service annotation", "derivedService", old,
			"annotation", wellknown.AnnotationDerivedService)
	}
	updated := s.si.DeepCopy()
	updated.Labels = desired.Labels
	updated.Annotations = desired.Annotations
	updated.Spec = desired.Spec
	if err := r.Client.Update(ctx, updated); err != nil {
		return s.si, fmt.Errorf("update ServiceImport: %w", err)
	}
	// The update response carries the stored status; keep the one being
	// built, which the deferred patch compares with the stored one.
	updated.Status = s.si.Status
	return updated, nil
}

// errImportBehind: reconcileImport left the ServiceImport's update, or its
// creation, for the next look, once the cache has caught up
// (lookAgainIfBehind).
var errImportBehind = errors.New("the ServiceImport in the cache is older than the API server's")

// lookAgainIfBehind turns errImportBehind into a look again soon
// (recheckSoon), and returns the other errors.
func (s *scope) lookAgainIfBehind(err error) error {
	if errors.Is(err, errImportBehind) {
		s.recheckSoon()
		return nil
	}
	return err
}

// setImport makes si, when there is one, the import's ServiceImport.
func (s *scope) setImport(si *mcsv1beta1.ServiceImport) {
	if si != nil {
		s.si = si
	}
}

// desiredImport is the ServiceImport the registry asks for, with the IPs
// and families of the derived Service when it has them.
func desiredImport(s *scope) *mcsv1beta1.ServiceImport {
	annotations := maps.Clone(s.res.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[wellknown.AnnotationManaged] = "true"
	spec := *s.res.Spec.DeepCopy()
	spec.IPs = nil
	s.retiring.annotate(annotations)
	if spec.Type == mcsv1beta1.ClusterSetIP {
		if s.foreignSvc == nil {
			// Not while another party's Service holds the name: a
			// gateway would send the import's traffic to its pods.
			annotations[wellknown.AnnotationDerivedService] = s.derivedName
		}
		if s.svc != nil && !needsRecreate(s.svc, spec.IPFamilies) {
			spec.IPFamilies, spec.IPs = importIPs(s.svc, spec.IPFamilies)
		}
	}
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   s.key.Namespace,
			Name:        s.key.Name,
			Labels:      maps.Clone(s.res.Labels),
			Annotations: annotations,
		},
		Spec: spec,
	}
}

// importUpToDate reports whether si already has desired's labels,
// annotations and spec. mcsd owns the whole ServiceImport: labels and
// annotations it did not set are removed.
func importUpToDate(si, desired *mcsv1beta1.ServiceImport) bool {
	return maps.Equal(si.Labels, desired.Labels) &&
		maps.Equal(si.Annotations, desired.Annotations) &&
		equality.Semantic.DeepEqual(si.Spec, desired.Spec)
}
