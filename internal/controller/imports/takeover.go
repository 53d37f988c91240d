package imports

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
)

// Taking over from the AWS Cloud Map MCS controller
//
// That controller imports a Service as a ServiceImport annotated with
// wellknown.AWSAnnotationDerivedService, one derived Service per source
// cluster ("imported-<hash>", labelled with the import's name and owned by
// the ServiceImport; the import's IPs are all of theirs) and EndpointSlices
// per derived Service. When mcsd starts in its place it takes that import
// over without a moment in which a name, an address or an endpoint the
// cluster answered with stops working:
//
//   - one of the derived Services (the first by name) becomes mcsd's derived
//     Service, its cluster IP the import's: every answer mcsd gives was a
//     valid answer before;
//   - the others are retiring: until a grace period (Reconciler.RetireGrace)
//     has passed, as long as a DNS answer naming them may be cached, mcsd
//     gives each the import's whole EndpointSlices; then it deletes them;
//   - the ServiceImport becomes mcsd's (its annotations and labels replaced,
//     the retiring Services and their deadline recorded on it, so that a
//     restart goes on where it was);
//   - the controller's EndpointSlices go once mcsd's are in place.
//
// See docs/migrate-from-aws.md.

// DefaultRetireGrace is how long the derived Services of a taken-over import
// that mcsd did not adopt keep carrying its traffic.
const DefaultRetireGrace = 5 * time.Minute

// awsDerivedPrefix begins the names of the AWS controller's derived Services.
const awsDerivedPrefix = "imported-"

// isAWSImport reports whether si was created by the AWS Cloud Map MCS
// controller.
func isAWSImport(si *mcsv1beta1.ServiceImport) bool {
	_, ok := si.Annotations[wellknown.AWSAnnotationDerivedService]
	return ok && !isManaged(si)
}

// retirement is what remains of a take-over: the derived Services still to
// delete and when.
type retirement struct {
	services []string
	after    time.Time
}

// retirementOf reads the retirement recorded on si; none when there is none
// or it cannot be read (then the Services are left as they are).
func retirementOf(si *mcsv1beta1.ServiceImport) retirement {
	if si == nil {
		return retirement{}
	}
	at, err := time.Parse(time.RFC3339, si.Annotations[wellknown.AnnotationRetireAfter])
	if err != nil {
		return retirement{}
	}
	var names []string
	for n := range strings.SplitSeq(si.Annotations[wellknown.AnnotationRetiring], ",") {
		if n != "" {
			names = append(names, n)
		}
	}
	return retirement{services: names, after: at}
}

// annotate records r on a ServiceImport's annotations.
func (r retirement) annotate(annotations map[string]string) {
	if r.after.IsZero() {
		return
	}
	annotations[wellknown.AnnotationRetiring] = strings.Join(r.services, ",")
	annotations[wellknown.AnnotationRetireAfter] = r.after.UTC().Format(time.RFC3339)
}

// takeOver prepares the take-over of si, an import of the AWS controller,
// whose merged exports ask for families: it finds that controller's derived
// Services of the import, makes the first by name that can stay the
// import's (a cluster IP, of one of the import's families) mcsd's
// (adoptAWSService) and returns it (nil when none fits, such as for a
// headless import) and the retirement of the others.
func (r *Reconciler) takeOver(ctx context.Context, si *mcsv1beta1.ServiceImport, families []corev1.IPFamily) (*corev1.Service, retirement, error) {
	log := ctrl.LoggerFrom(ctx)
	candidates, err := r.awsDerivedServices(ctx, si)
	if err != nil {
		return nil, retirement{}, err
	}
	// Kubernetes does not change a Service's primary family: one whose
	// family the import does not have would have to be recreated, with
	// another IP; it retires. One of a family the import has stays, that
	// family kept first (keepPrimaryFamily).
	adoptable := func(svc *corev1.Service) bool {
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return false
		}
		has, _ := importIPs(svc, nil)
		return len(families) == 0 || (len(has) > 0 && slices.Contains(families, has[0]))
	}
	// One adopted by an earlier try that did not finish comes first, then
	// one whose family is the import's first.
	i := slices.IndexFunc(candidates, func(svc *corev1.Service) bool { return isOurService(svc, si.Name) && adoptable(svc) })
	if i < 0 && len(families) > 0 {
		i = slices.IndexFunc(candidates, func(svc *corev1.Service) bool {
			has, _ := importIPs(svc, nil)
			return adoptable(svc) && has[0] == families[0]
		})
	}
	if i < 0 {
		i = slices.IndexFunc(candidates, adoptable)
	}
	var adopt *corev1.Service
	var retire []string
	for j, svc := range candidates {
		if j == i {
			adopt = svc
			continue
		}
		retire = append(retire, svc.Name)
	}
	grace := r.RetireGrace
	if grace == 0 {
		grace = DefaultRetireGrace
	}
	if grace < 0 || si.Spec.Type == mcsv1beta1.Headless {
		// No cluster IP to have been cached (or no grace asked for): they
		// go once mcsd's slices are in place.
		grace = 0
	}
	ret := retirement{services: retire, after: r.now().Add(grace).Truncate(time.Second)}
	name := ""
	// Adopted already: the cache showed the ServiceImport as it was before
	// a take-over that wrote it; said once.
	again := adopt != nil && isOurService(adopt, si.Name)
	if adopt != nil {
		if adopt, err = r.adoptAWSService(ctx, si, adopt); err != nil {
			return nil, retirement{}, err
		}
		name = adopt.Name
	}
	if again {
		log.V(1).Info("Taking over the AWS Cloud Map MCS controller's ServiceImport again", "derivedService", name)
		return adopt, ret, nil
	}
	log.Info("Taking over the AWS Cloud Map MCS controller's ServiceImport", "derivedService", name,
		"retiring", retire, "retireAfter", ret.after)
	r.eventf(si, corev1.EventTypeNormal, eventTakenOver,
		"mcsd takes this import over from the AWS Cloud Map MCS controller: derived Service %q kept (its cluster IP stays the import's); %d other derived Services carry the import's endpoints until %s, then go",
		name, len(retire), ret.after.UTC().Format(time.RFC3339))
	return adopt, ret, nil
}

// adoptAWSService makes svc, a derived Service of the AWS controller of the
// import si, mcsd's: marked as mcsd marks its own (with the families svc
// has as those asked for: an import of more, of the same primary family,
// changes svc in place on the next reconcile, updateFamilies), the
// controller's labels removed. Nothing that kube-proxy reads changes. It
// returns svc as written; one already mcsd's is returned as it is.
func (r *Reconciler) adoptAWSService(ctx context.Context, si *mcsv1beta1.ServiceImport, svc *corev1.Service) (*corev1.Service, error) {
	if isOurService(svc, si.Name) {
		return svc, nil
	}
	families, _ := importIPs(svc, nil)
	updated := svc.DeepCopy()
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	updated.Annotations[wellknown.AnnotationManaged] = "true"
	updated.Annotations[wellknown.AnnotationServiceImport] = si.Name
	updated.Annotations[wellknown.AnnotationIPFamilies] = joinFamilies(families)
	delete(updated.Labels, mcsv1beta1.LabelServiceName)
	delete(updated.Labels, mcsv1beta1.LabelSourceCluster)
	if err := r.Client.Patch(ctx, updated, client.MergeFrom(svc)); err != nil {
		return nil, fmt.Errorf("adopt the AWS controller's derived Service %s: %w", svc.Name, err)
	}
	return updated, nil
}

// isAWSDerivedOf reports whether svc is a derived Service the AWS
// controller made for the import si (and mcsd has not marked as its own).
func isAWSDerivedOf(svc *corev1.Service, si *mcsv1beta1.ServiceImport) bool {
	return ownedAWSName(svc, si) && !isManaged(svc)
}

// ownedAWSName reports whether svc has the AWS controller's derived name
// and the ServiceImport si as its controller.
func ownedAWSName(svc *corev1.Service, si *mcsv1beta1.ServiceImport) bool {
	c := metav1.GetControllerOfNoCopy(svc)
	return si != nil && strings.HasPrefix(svc.Name, awsDerivedPrefix) && c != nil && c.UID == si.UID
}

// awsDerivedServices returns the AWS controller's derived Services of si,
// sorted by name: those its annotation names (the clusters at the import's
// creation) and those owned by it (clusters added later, which the
// annotation does not list; found by owner rather than by label, as the
// one adopted by an unfinished earlier try has lost the controller's
// labels). It reads the namespace's Services from the cache, once per
// take-over.
func (r *Reconciler) awsDerivedServices(ctx context.Context, si *mcsv1beta1.ServiceImport) ([]*corev1.Service, error) {
	var entries []struct {
		Cluster string `json:"cluster"`
		Service string `json:"derived-service"`
	}
	if err := json.Unmarshal([]byte(si.Annotations[wellknown.AWSAnnotationDerivedService]), &entries); err != nil {
		ctrl.LoggerFrom(ctx).Info("Unreadable derived-service annotation of the AWS controller; using its labels only", "reason", err.Error())
	}
	// The AWS controller's, or one mcsd adopted for si in a take-over that
	// did not finish.
	candidate := func(svc *corev1.Service) bool { return !isManaged(svc) || isOurService(svc, si.Name) }
	found := map[string]*corev1.Service{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Service, awsDerivedPrefix) {
			continue
		}
		svc := &corev1.Service{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: si.Namespace, Name: e.Service}, svc)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("get the AWS controller's derived Service: %w", err)
		case candidate(svc):
			found[svc.Name] = svc
		}
	}
	list := &corev1.ServiceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(si.Namespace)); err != nil {
		return nil, fmt.Errorf("list the AWS controller's derived Services: %w", err)
	}
	for i := range list.Items {
		svc := &list.Items[i]
		if ownedAWSName(svc, si) && candidate(svc) {
			found[svc.Name] = svc
		}
	}
	out := slices.Collect(maps.Values(found))
	slices.SortFunc(out, func(a, b *corev1.Service) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// retireDue deletes the retiring Services of s's import once their grace
// has passed and the AWS controller's EndpointSlices are gone, and then
// drops the retirement (the ServiceImport's annotations and the retiring
// Services' slices follow in the same reconcile). It sets s.recheck to look
// again when the grace ends.
func (r *Reconciler) retireDue(ctx context.Context, s *scope) error {
	if s.retiring.after.IsZero() {
		return nil
	}
	if wait := s.retiring.after.Sub(r.now()); wait > 0 {
		s.recheckAt(wait)
		return nil
	}
	left, err := r.awsSlices(ctx, s)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		// Deleted once mcsd's are in place (removeAWSSlices).
		return nil
	}
	for _, name := range s.retiring.services {
		svc := &corev1.Service{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.key.Namespace, Name: name}, svc)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("get retiring Service: %w", err)
		case isManaged(svc):
			continue // not the AWS controller's (any more)
		}
		if err := r.Client.Delete(ctx, svc); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete retiring Service %s: %w", name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Deleted a derived Service of the AWS controller: its grace ended", "service", klog.KObj(svc))
	}
	s.retiring = retirement{}
	return nil
}

// removeAWSSlices deletes the AWS controller's EndpointSlices of s's
// import, once mcsd's own (and the retiring Services') are in place.
func (r *Reconciler) removeAWSSlices(ctx context.Context, s *scope) error {
	if s.retiring.after.IsZero() || !s.slicesInPlace {
		return nil
	}
	n, err := r.deleteSlicesBy(ctx, s.key, wellknown.AWSManagedBy)
	if err != nil {
		return err
	}
	if n > 0 {
		ctrl.LoggerFrom(ctx).Info("Deleted the AWS controller's EndpointSlices: mcsd's are in place", "count", n)
		// The retirement ends once the cache shows them gone.
		s.recheckAt(s.retiring.after.Sub(r.now()))
	}
	return nil
}

// awsSlices lists the AWS controller's EndpointSlices of s's import.
func (r *Reconciler) awsSlices(ctx context.Context, s *scope) ([]discoveryv1.EndpointSlice, error) {
	return r.listSlicesBy(ctx, s.key, wellknown.AWSManagedBy)
}

// retiringSlices returns, for each retiring Service of a ClusterSetIP
// import, a copy of every slice of the import (primary) that names it, so
// that the Service carries the whole import's traffic while it retires.
// They are owned by the ServiceImport.
func retiringSlices(s *scope, primary []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	// The ServiceImport's reference is the last owner (setSliceOwners).
	if s.res.Spec.Type != mcsv1beta1.ClusterSetIP || len(s.sliceOwners) == 0 ||
		s.sliceOwners[len(s.sliceOwners)-1].Kind != mcsv1beta1.ServiceImportKindName {
		return nil
	}
	owner := s.sliceOwners[len(s.sliceOwners)-1]
	var out []*discoveryv1.EndpointSlice
	for _, name := range s.retiring.services {
		for _, p := range primary {
			c := p.DeepCopy()
			c.Name = truncate(s.key.Name, sliceNamePart) + "-retiring-" + hash(p.Name, name)[:derivedHashLen]
			c.Labels[discoveryv1.LabelServiceName] = name
			c.OwnerReferences = []metav1.OwnerReference{owner}
			out = append(out, c)
		}
	}
	return out
}

// deleteAWSImport deletes an import of the AWS controller whose Service no
// cluster exports any more, as that controller would have: the garbage
// collector takes its derived Services and their slices with it.
func (r *Reconciler) deleteAWSImport(ctx context.Context, si *mcsv1beta1.ServiceImport) error {
	ctrl.LoggerFrom(ctx).Info("Deleting the AWS Cloud Map MCS controller's ServiceImport: the Service is no longer exported")
	if err := r.Client.Delete(ctx, si, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete the AWS controller's ServiceImport: %w", err)
	}
	return nil
}
