package imports

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/internal/wellknown"
)

// The derived Service
//
// A ClusterSetIP import gets its IPs from a selectorless ClusterIP Service
// that mcsd creates next to the ServiceImport (DerivedServiceName), owned by
// it. For a new import the Service is created first, without an owner, so
// that the ServiceImport is created with its IPs; it gets its owner right
// after. The import's EndpointSlices are owned by the Service. kube-proxy routes the Service's cluster IPs to the import's
// EndpointSlices, which name it in kubernetes.io/service-name.
//
// The import's IPs must stay stable for its whole life, so the Service is
// updated in place and never recreated, with one exception: when the
// import no longer has the Service's primary IP family (the oldest export
// changed its families), the Service is deleted and created again, since
// Kubernetes does not let a Service change its primary family, and the
// import's IPs change with it. While the import has that family, it comes
// first in the import's families whatever the oldest export's order
// (keepPrimaryFamily), and a secondary family added or dropped is changed in
// place: the primary cluster IP stays. mcsd compares the families it asked for
// (wellknown.AnnotationIPFamilies), not the ones the Service got, so a
// Service the cluster gave fewer families is not changed over and over.
//
// When the API server refuses a family (a single-stack cluster), mcsd
// creates the Service with the families it accepts, and Ready says which were
// dropped (IPFamilyNotSupported). It does not try the dropped families again
// until the import's families change.

// readDerivedService finds the derived Service: s.svc when it is mcsd's,
// s.foreignSvc when another party created a Service of that name.
func (r *Reconciler) readDerivedService(ctx context.Context, s *scope) error {
	if s.svc != nil {
		// Just adopted (takeOver): the cache may not show it as mcsd's yet.
		return nil
	}
	svc := &corev1.Service{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.key.Namespace, Name: s.derivedName}, svc)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get derived Service: %w", err)
	case isOurService(svc, s.key.Name):
		s.svc = svc
	case isAWSDerivedOf(svc, s.si):
		// Adopted in a take-over that the cache does not show yet (or
		// whose adoption failed): adopted again, as it was.
		adopted, err := r.adoptAWSService(ctx, s.si, svc)
		if err != nil {
			return err
		}
		s.svc = adopted
	default:
		s.foreignSvc = svc
	}
	return nil
}

// deleteService deletes the derived Service s.svc, the one the cache
// showed: a cache that has not seen it replaced yet must not have the new
// one, of the same name, deleted (a UID precondition). A delete refused so
// is errServiceNotCached: the import is looked at again once the cache has
// caught up.
func (r *Reconciler) deleteService(ctx context.Context, s *scope) error {
	var pre client.Preconditions
	if uid := s.svc.UID; uid != "" {
		pre.UID = &uid
	}
	err := r.Client.Delete(ctx, s.svc, pre)
	switch {
	case apierrors.IsConflict(err):
		ctrl.LoggerFrom(ctx).V(1).Info("Derived Service replaced since the cache showed it", "service", klog.KObj(s.svc))
		return errServiceNotCached
	case client.IgnoreNotFound(err) != nil:
		s.svcErr = err
		return fmt.Errorf("delete derived Service: %w", err)
	}
	return nil
}

// isOurService reports whether svc is the Service mcsd derived for the
// import called name.
func isOurService(svc *corev1.Service, name string) bool {
	return isManaged(svc) && svc.Annotations[wellknown.AnnotationServiceImport] == name
}

// reconcileService creates, updates or (for a family change) recreates the
// derived Service of a ClusterSetIP import, and deletes mcsd's derived
// Service of a Headless one.
func (r *Reconciler) reconcileService(ctx context.Context, s *scope) error {
	log := ctrl.LoggerFrom(ctx)
	if s.res.Spec.Type != mcsv1beta1.ClusterSetIP {
		if s.svc == nil {
			return nil
		}
		if err := r.deleteService(ctx, s); err != nil {
			return err
		}
		log.Info("Deleted derived Service: the import is headless", "service", klog.KObj(s.svc))
		s.svc = nil
		return nil
	}
	if s.foreignSvc != nil {
		log.Error(errServiceConflict, "A Service that mcsd did not create holds the derived Service's name; leaving it alone", "service", klog.KObj(s.foreignSvc))
		r.importEventf(s, corev1.EventTypeWarning, eventServiceConflict,
			"Service %s was not created by mcsd: the import gets no cluster IP until it is deleted or renamed", s.derivedName)
		return nil
	}
	if len(s.res.Spec.Ports) == 0 {
		// A ClusterIP Service needs a port; Ready says why there is none.
		return nil
	}
	desired := desiredService(s)
	td := desired.Spec.TrafficDistribution
	if td != nil && r.tdRefusedLately(*td) {
		desired.Spec.TrafficDistribution = nil
	}

	if s.svc != nil && needsRecreate(s.svc, s.res.Spec.IPFamilies) {
		if err := r.deleteService(ctx, s); err != nil {
			return err
		}
		log.Info("Recreating derived Service: the import's IP families changed", "service", klog.KObj(s.svc),
			"from", requestedFamilies(s.svc), "to", desired.Annotations[wellknown.AnnotationIPFamilies])
		r.importEventf(s, corev1.EventTypeNormal, eventServiceRecreated,
			"IP families changed from [%s] to [%s]: recreating the derived Service %s, the import's IPs change",
			requestedFamilies(s.svc), desired.Annotations[wellknown.AnnotationIPFamilies], s.derivedName)
		s.svc = nil
	}

	if s.svc == nil {
		svc, refused, err := r.createService(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			log.V(1).Info("Derived Service exists but is not in the cache yet", "service", klog.KObj(desired))
			return errServiceNotCached
		}
		if err != nil {
			s.svcErr = err
			return err
		}
		if svc == nil {
			s.unsupported = refused
			if !hasReadyReason(s.si, mcsv1beta1.ServiceImportReasonIPFamilyNotSupported) {
				// Said once, as the import comes to say it.
				r.importEventf(s, corev1.EventTypeWarning, eventFamilyRefused,
					"This cluster supports none of the import's IP families (%s): no derived Service, no cluster IP", joinFamilies(refused))
			}
			return nil
		}
		r.familiesRefused(s, svc, refused)
		r.tdDropped(s, td, svc)
		log.Info("Created derived Service", "service", klog.KObj(svc), "ipFamilies", svc.Spec.IPFamilies)
		s.svc, s.svcWritten = svc, true
		return nil
	}

	if serviceUpToDate(s.svc, desired) {
		return nil
	}
	updated := s.svc.DeepCopy()
	applyService(updated, desired)
	if familiesChanged(s.svc, s.res.Spec.IPFamilies) {
		// Of the same primary family (needsRecreate): changed in place.
		var (
			refused []corev1.IPFamily
			err     error
		)
		if updated, refused, err = r.updateFamilies(ctx, updated, s.res.Spec.IPFamilies); err != nil {
			s.svcErr = err
			return err
		}
		r.familiesRefused(s, updated, refused)
	} else if err := r.withoutRefusedTD(ctx, updated, func(svc *corev1.Service) error { return r.Client.Update(ctx, svc) }); err != nil {
		s.svcErr = err
		return fmt.Errorf("update derived Service: %w", err)
	}
	r.tdDropped(s, td, updated)
	log.V(1).Info("Updated derived Service", "service", klog.KObj(updated))
	s.svc, s.svcWritten = updated, true
	return nil
}

var errServiceConflict = errors.New("derived Service name taken")

// errServiceNotCached: the derived Service to create exists, but the cache
// has not seen it yet (an API server restarted under the controller leaves
// its watches behind for a while), or the one to delete was replaced since
// the cache showed it. The import is looked at again soon, rather than
// retried with the errors' backoff.
var errServiceNotCached = errors.New("derived Service exists but is not in the cache yet")

// adoptService makes the ServiceImport of ref the controller of svc, a
// derived Service created before it (or whose owner was removed). svc is
// not modified.
//
// A Service this reconcile wrote (written: svc is as the API server
// returned it) is updated at the version it was written at: no patch to
// compute, and a little less work for the API server than a patch, which
// it applies to the object as stored (docs/design.md). A conflict (someone
// wrote the Service since) falls back to the patch.
//
// The patch is a strategic merge patch of the owner references: a Service
// read from the cache may be behind it, where an update would fail on a
// stale resource version and the patch merely writes the same owner again;
// owner references merge by uid, so those others added since the cache's
// copy are kept.
func (r *Reconciler) adoptService(ctx context.Context, svc *corev1.Service, ref metav1.OwnerReference, written bool) error {
	owned := func() *corev1.Service {
		o := svc.DeepCopy()
		setControllerRef(o, ref)
		return o
	}
	if written {
		err := r.Client.Update(ctx, owned())
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("set the derived Service's owner: %w", err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Derived Service written since this reconcile wrote it; patching its owner", "service", klog.KObj(svc))
	}
	if err := r.Client.Patch(ctx, owned(), client.StrategicMergeFrom(svc)); err != nil {
		return fmt.Errorf("set the derived Service's owner: %w", err)
	}
	return nil
}

// desiredService is the derived Service of s's import. Its IP fields are
// those of a new Service; an existing one keeps its own.
func desiredService(s *scope) *corev1.Service {
	spec := s.res.Spec
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.key.Namespace,
			Name:      s.derivedName,
			Annotations: map[string]string{
				wellknown.AnnotationManaged:       "true",
				wellknown.AnnotationServiceImport: s.key.Name,
				wellknown.AnnotationIPFamilies:    joinFamilies(spec.IPFamilies),
			},
		},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			SessionAffinity:       spec.SessionAffinity,
			SessionAffinityConfig: spec.SessionAffinityConfig.DeepCopy(),
			InternalTrafficPolicy: spec.InternalTrafficPolicy,
			TrafficDistribution:   spec.TrafficDistribution,
		},
	}
	for _, p := range spec.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name:        p.Name,
			Protocol:    p.Protocol,
			AppProtocol: p.AppProtocol,
			Port:        p.Port,
			TargetPort:  intstr.FromInt32(p.Port),
		})
	}
	setFamilies(svc, spec.IPFamilies)
	if s.si != nil {
		// Before the ServiceImport exists, the Service is created without
		// an owner and given it once the ServiceImport is created.
		svc.OwnerReferences = []metav1.OwnerReference{ownerRef(s.si)}
	}
	return svc
}

// setFamilies asks for exactly families: one is SingleStack, two are
// RequireDualStack. None leaves the choice to the cluster.
func setFamilies(svc *corev1.Service, families []corev1.IPFamily) {
	svc.Spec.IPFamilies = slices.Clone(families)
	var policy corev1.IPFamilyPolicy
	switch len(families) {
	case 0:
		svc.Spec.IPFamilyPolicy = nil
		return
	case 1:
		policy = corev1.IPFamilyPolicySingleStack
	default:
		policy = corev1.IPFamilyPolicyRequireDualStack
	}
	svc.Spec.IPFamilyPolicy = &policy
}

// createService creates desired, dropping the IP families the API server
// refuses and trying again. It returns the Service created and the families
// dropped; no Service (and no error) when every family was refused.
func (r *Reconciler) createService(ctx context.Context, desired *corev1.Service) (*corev1.Service, []corev1.IPFamily, error) {
	// The families refused lately are not asked for again: a cluster
	// that supports none of an import's families would otherwise be sent
	// a create it refuses at every reconcile of it, and each new import of
	// a dual-stack Service into a single-stack cluster one it refuses.
	want := desired.Spec.IPFamilies
	families := slices.DeleteFunc(slices.Clone(want), r.familyRefusedLately)
	inOrder := func(refused []corev1.IPFamily) []corev1.IPFamily {
		return slices.DeleteFunc(slices.Clone(want), func(f corev1.IPFamily) bool {
			return slices.Contains(families, f) && !slices.Contains(refused, f)
		})
	}
	if len(want) > 0 && len(families) == 0 {
		return nil, inOrder(nil), nil
	}
	var created *corev1.Service
	refused, err := writeFamilies(ctx, families, false, func(families []corev1.IPFamily) error {
		svc := desired.DeepCopy()
		setFamilies(svc, families)
		if err := r.withoutRefusedTD(ctx, svc, func(svc *corev1.Service) error { return r.Client.Create(ctx, svc) }); err != nil {
			return err
		}
		created = svc
		return nil
	})
	for _, f := range refused {
		r.familyRefused.Store(f, r.now())
	}
	if err != nil {
		return nil, inOrder(refused), fmt.Errorf("create derived Service: %w", err)
	}
	return created, inOrder(refused), nil
}

// familyRetry is how long an IP family the API server refused is left out
// of the derived Services created, before one is created with it again (the
// cluster made dual-stack meanwhile).
const familyRetry = 10 * time.Minute

// familyRefusedLately reports whether the API server refused f less than
// familyRetry ago.
func (r *Reconciler) familyRefusedLately(f corev1.IPFamily) bool {
	at, ok := r.familyRefused.Load(f)
	return ok && r.now().Sub(at.(time.Time)) < familyRetry
}

// writeFamilies calls write with families, then, while the API server
// refuses some of them (refusedFamilies), again without those. It returns
// the families dropped, and write's last error when it failed for another
// reason. Unless keepFirst, it stops with no error once every family was
// refused; with keepFirst (an update, whose primary family the Service has
// already), a refusal of the first is write's error.
func writeFamilies(ctx context.Context, families []corev1.IPFamily, keepFirst bool, write func([]corev1.IPFamily) error) ([]corev1.IPFamily, error) {
	families = slices.Clone(families)
	var refused []corev1.IPFamily
	for {
		err := write(families)
		if err == nil {
			return refused, nil
		}
		bad := refusedFamilies(err, families)
		if len(bad) == 0 || (keepFirst && slices.Contains(bad, families[0])) {
			return refused, err
		}
		refused = append(refused, bad...)
		families = slices.DeleteFunc(families, func(f corev1.IPFamily) bool { return slices.Contains(bad, f) })
		ctrl.LoggerFrom(ctx).Info("API server refused IP families of the derived Service", "refused", bad, "remaining", families, "reason", err.Error())
		if len(families) == 0 {
			return refused, nil
		}
	}
}

// refusedFamilies returns the families of the request that the API server's
// Invalid error err refuses: those at the spec.ipFamilies[i] it names ("not
// configured on this cluster"). An error only about spec.ipFamilyPolicy
// ("this cluster is not configured for dual-stack services") refuses the
// secondary family. Any other error refuses none.
func refusedFamilies(err error, families []corev1.IPFamily) []corev1.IPFamily {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return nil
	}
	details := status.Status().Details
	if details == nil {
		return nil
	}
	var (
		bad    []corev1.IPFamily
		policy bool
	)
	for _, c := range details.Causes {
		switch {
		case c.Field == "spec.ipFamilyPolicy":
			policy = true
		case strings.HasPrefix(c.Field, "spec.ipFamilies["):
			i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(c.Field, "spec.ipFamilies["), "]"))
			if err == nil && i >= 0 && i < len(families) && !slices.Contains(bad, families[i]) {
				bad = append(bad, families[i])
			}
		}
	}
	if len(bad) == 0 && policy && len(families) == 2 {
		bad = families[1:]
	}
	return bad
}

// keepPrimaryFamily moves the primary IP family of the derived Service svc
// to the front of families, the import's, when they have it: an oldest
// export that lists the same families in another order, or adds the other
// one, changes neither the Service nor the import's IPs. families is
// changed in place.
func keepPrimaryFamily(families []corev1.IPFamily, svc *corev1.Service) {
	if svc == nil || len(families) < 2 {
		return
	}
	has, _ := importIPs(svc, nil)
	if len(has) == 0 {
		return
	}
	if i := slices.Index(families, has[0]); i > 0 {
		copy(families[1:i+1], families[:i])
		families[0] = has[0]
	}
}

// needsRecreate reports whether the derived Service svc must be deleted and
// created again for an import of the given families: its primary family
// changed (Kubernetes changes a Service's secondary family in place, with
// its primary cluster IP kept, but not its primary one), or someone made it
// headless or an ExternalName.
func needsRecreate(svc *corev1.Service, families []corev1.IPFamily) bool {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return true
	}
	if !familiesChanged(svc, families) {
		return false
	}
	has, _ := importIPs(svc, nil)
	return len(has) == 0 || has[0] != families[0]
}

// familiesChanged reports whether an import of the given families asks for
// other families than the derived Service svc was made for.
func familiesChanged(svc *corev1.Service, families []corev1.IPFamily) bool {
	if len(families) == 0 {
		// The cluster chose; any choice will do.
		return false
	}
	requested := requestedFamilies(svc)
	if requested == "" {
		// Created while the import named no families (the cluster chose,
		// or another controller made it): what the cluster gave it is
		// what it has.
		requested = joinFamilies(svc.Spec.IPFamilies)
	}
	return requested != joinFamilies(families)
}

// updateFamilies updates svc, the derived Service with desired applied
// (applyService), to families, whose first is svc's primary family: its
// secondary family added or dropped in place, its primary cluster IP kept
// (the API server allocates or releases the secondary one). As createService
// does, it drops the families the API server refuses (a single-stack
// cluster) and tries again; the Service keeps its primary family, which the
// cluster gave it. It returns the Service as updated and the families
// dropped.
func (r *Reconciler) updateFamilies(ctx context.Context, svc *corev1.Service, families []corev1.IPFamily) (*corev1.Service, []corev1.IPFamily, error) {
	var updated *corev1.Service
	refused, err := writeFamilies(ctx, families, true, func(families []corev1.IPFamily) error {
		try := svc.DeepCopy()
		setFamilies(try, families)
		try.Spec.ClusterIPs = slices.DeleteFunc(slices.Clone(try.Spec.ClusterIPs), func(ip string) bool { return !slices.Contains(families, familyOf(ip)) })
		if len(try.Spec.ClusterIPs) > 0 {
			try.Spec.ClusterIP = try.Spec.ClusterIPs[0]
		}
		if err := r.withoutRefusedTD(ctx, try, func(svc *corev1.Service) error { return r.Client.Update(ctx, svc) }); err != nil {
			return err
		}
		updated = try
		return nil
	})
	if err != nil {
		return nil, refused, fmt.Errorf("update derived Service's IP families: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("Changed the derived Service's IP families in place", "service", klog.KObj(updated), "ipFamilies", updated.Spec.IPFamilies)
	return updated, refused, nil
}

// familiesRefused tells, by an event on the import, that this cluster
// refused the IP families refused of the derived Service svc, when any.
func (r *Reconciler) familiesRefused(s *scope, svc *corev1.Service, refused []corev1.IPFamily) {
	if len(refused) > 0 {
		r.importEventf(s, corev1.EventTypeWarning, eventFamilyRefused,
			"This cluster refused IP families %s: the derived Service %s has %s only", joinFamilies(refused), svc.Name, joinFamilies(svc.Spec.IPFamilies))
	}
}

// requestedFamilies returns the families mcsd asked for when it created
// svc, or if that record was removed, the families svc has.
func requestedFamilies(svc *corev1.Service) string {
	if v, ok := svc.Annotations[wellknown.AnnotationIPFamilies]; ok {
		return v
	}
	return joinFamilies(svc.Spec.IPFamilies)
}

// serviceUpToDate reports whether the derived Service svc already has
// everything of desired that mcsd owns: its annotations and its spec other
// than the IP fields. Its controller reference is not compared: adoptService
// writes it, with a patch that a cache not yet showing it cannot make fail.
func serviceUpToDate(svc, desired *corev1.Service) bool {
	for k, v := range desired.Annotations {
		if got, ok := svc.Annotations[k]; !ok || got != v {
			return false
		}
	}
	a, b := svc.Spec, desired.Spec
	return a.Type == corev1.ServiceTypeClusterIP &&
		len(a.Selector) == 0 &&
		len(a.ExternalIPs) == 0 &&
		equality.Semantic.DeepEqual(normalServicePorts(a.Ports), normalServicePorts(b.Ports)) &&
		affinity(a.SessionAffinity) == affinity(b.SessionAffinity) &&
		equality.Semantic.DeepEqual(affinityConfig(a), affinityConfig(b)) &&
		trafficPolicy(a.InternalTrafficPolicy) == trafficPolicy(b.InternalTrafficPolicy) &&
		stringValue(a.TrafficDistribution) == stringValue(b.TrafficDistribution)
}

// applyService sets in svc what mcsd owns of desired (see serviceUpToDate),
// keeping its IP fields and anything else other parties added.
func applyService(svc, desired *corev1.Service) {
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	maps.Copy(svc.Annotations, desired.Annotations)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		// Fields only externally reachable Services may have.
		svc.Spec.ExternalTrafficPolicy = ""
		svc.Spec.HealthCheckNodePort = 0
		svc.Spec.LoadBalancerIP = ""
		svc.Spec.LoadBalancerSourceRanges = nil
		svc.Spec.LoadBalancerClass = nil
		svc.Spec.AllocateLoadBalancerNodePorts = nil
	}
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.Selector = nil
	svc.Spec.ExternalIPs = nil
	svc.Spec.Ports = desired.Spec.Ports
	svc.Spec.SessionAffinity = desired.Spec.SessionAffinity
	svc.Spec.SessionAffinityConfig = desired.Spec.SessionAffinityConfig
	svc.Spec.InternalTrafficPolicy = desired.Spec.InternalTrafficPolicy
	svc.Spec.TrafficDistribution = desired.Spec.TrafficDistribution
}

// normalServicePorts returns ports with API defaults spelled out, sorted.
func normalServicePorts(ports []corev1.ServicePort) []corev1.ServicePort {
	out := make([]corev1.ServicePort, len(ports))
	for i, p := range ports {
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.AppProtocol != nil && *p.AppProtocol == "" {
			p.AppProtocol = nil
		}
		if (p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal == 0) || (p.TargetPort.Type == intstr.String && p.TargetPort.StrVal == "") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
		out[i] = p
	}
	slices.SortFunc(out, func(a, b corev1.ServicePort) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
	return out
}

func affinity(a corev1.ServiceAffinity) corev1.ServiceAffinity {
	if a == "" {
		return corev1.ServiceAffinityNone
	}
	return a
}

// affinityConfig returns the ClientIP timeout that applies, or nil without
// ClientIP affinity.
func affinityConfig(spec corev1.ServiceSpec) *int32 {
	if affinity(spec.SessionAffinity) != corev1.ServiceAffinityClientIP {
		return nil
	}
	timeout := merge.DefaultClientIPTimeoutSeconds
	if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		timeout = *c.ClientIP.TimeoutSeconds
	}
	return &timeout
}

func trafficPolicy(p *corev1.ServiceInternalTrafficPolicy) corev1.ServiceInternalTrafficPolicy {
	if p == nil || *p == "" {
		return corev1.ServiceInternalTrafficPolicyCluster
	}
	return *p
}

func stringValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// importIPs returns the families and IPs of the derived Service svc for the
// ServiceImport: its spec.ipFamilies (the import's, less any the cluster
// refused) and one cluster IP per family, in that order. IPs is nil until
// the Service has an IP of every family; families fall back to want while
// the Service has none.
func importIPs(svc *corev1.Service, want []corev1.IPFamily) ([]corev1.IPFamily, []string) {
	clusterIPs := svc.Spec.ClusterIPs
	if len(clusterIPs) == 0 && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		clusterIPs = []string{svc.Spec.ClusterIP}
	}
	families := slices.Clone(svc.Spec.IPFamilies)
	if len(families) == 0 {
		for _, ip := range clusterIPs {
			if f := familyOf(ip); f != "" && !slices.Contains(families, f) {
				families = append(families, f)
			}
		}
	}
	if len(families) == 0 {
		return slices.Clone(want), nil
	}
	ips := make([]string, 0, len(families))
	for _, f := range families {
		i := slices.IndexFunc(clusterIPs, func(ip string) bool { return familyOf(ip) == f })
		if i < 0 {
			return families, nil
		}
		ips = append(ips, clusterIPs[i])
	}
	return families, ips
}

// familyOf returns the IP family of ip, or "" when it is not an address.
func familyOf(ip string) corev1.IPFamily {
	a, err := netip.ParseAddr(ip)
	switch {
	case err != nil:
		return ""
	case a.Is4():
		return corev1.IPv4Protocol
	default:
		return corev1.IPv6Protocol
	}
}

// missingFamilies returns the families mcsd asked for that svc lacks: those
// the cluster refused.
func missingFamilies(svc *corev1.Service) []corev1.IPFamily {
	if len(svc.Spec.IPFamilies) == 0 {
		return nil // not filled in yet
	}
	var missing []corev1.IPFamily
	for _, f := range splitFamilies(requestedFamilies(svc)) {
		if !slices.Contains(svc.Spec.IPFamilies, f) {
			missing = append(missing, f)
		}
	}
	return missing
}

func joinFamilies(fs []corev1.IPFamily) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ",")
}

func splitFamilies(s string) []corev1.IPFamily {
	var out []corev1.IPFamily
	for f := range strings.SplitSeq(s, ",") {
		if f != "" {
			out = append(out, corev1.IPFamily(f))
		}
	}
	return out
}

// ownerRef is the controller reference to the ServiceImport si that every
// object mcsd derives for it carries.
func ownerRef(si *mcsv1beta1.ServiceImport) metav1.OwnerReference {
	return *metav1.NewControllerRef(si, mcsv1beta1.SchemeGroupVersion.WithKind(mcsv1beta1.ServiceImportKindName))
}

// hasControllerRef reports whether o's controller is ref's object.
func hasControllerRef(o metav1.Object, ref metav1.OwnerReference) bool {
	c := metav1.GetControllerOfNoCopy(o)
	return c != nil && c.UID == ref.UID && c.Kind == ref.Kind && c.APIVersion == ref.APIVersion && c.Name == ref.Name
}

// setControllerRef makes ref o's controller, keeping o's other owners.
func setControllerRef(o metav1.Object, ref metav1.OwnerReference) {
	refs := slices.DeleteFunc(slices.Clone(o.GetOwnerReferences()), func(r metav1.OwnerReference) bool {
		return (r.Controller != nil && *r.Controller) || r.UID == ref.UID
	})
	o.SetOwnerReferences(append(refs, ref))
}

// withoutRefusedTD writes svc (write); when the API server refuses its
// trafficDistribution (Kubernetes before 1.33 knows PreferClose alone, 1.33
// PreferSameZone and PreferSameNode only behind a feature gate), it
// remembers the value and writes svc again without it. kube-proxy reads
// the hints of the EndpointSlices, which mcsd writes, not the Service's
// field: the derived Service goes without it rather than the import
// without a cluster IP.
func (r *Reconciler) withoutRefusedTD(ctx context.Context, svc *corev1.Service, write func(*corev1.Service) error) error {
	err := write(svc)
	td := svc.Spec.TrafficDistribution
	if td == nil || !trafficDistributionRefused(err) {
		return err
	}
	r.tdRefused.Store(*td, r.now())
	ctrl.LoggerFrom(ctx).Info("API server refused the derived Service's trafficDistribution; writing it without", "service", klog.KObj(svc),
		"trafficDistribution", *td, "reason", err.Error())
	svc.Spec.TrafficDistribution = nil
	return write(svc)
}

// tdRetry is how long a trafficDistribution the API server refused is left
// out of the derived Services before one is written with it again (the
// cluster upgraded, or its feature gate turned on, meanwhile).
const tdRetry = 10 * time.Minute

// tdRefusedLately reports whether the API server refused td less than
// tdRetry ago.
func (r *Reconciler) tdRefusedLately(td string) bool {
	at, ok := r.tdRefused.Load(td)
	return ok && r.now().Sub(at.(time.Time)) < tdRetry
}

// tdDropped says, on the ServiceImport, that the derived Service svc was
// written without the trafficDistribution td the import has: at each write
// of it, so that every import concerned says so, not only the one whose
// write met the refusal.
func (r *Reconciler) tdDropped(s *scope, td *string, svc *corev1.Service) {
	if td != nil && svc.Spec.TrafficDistribution == nil {
		r.importEventf(s, corev1.EventTypeWarning, eventTrafficDistributionRefused,
			"This cluster's API server refuses trafficDistribution %q: the derived Service %s goes without it; its EndpointSlices carry the hints kube-proxy follows", *td, svc.Name)
	}
}

// trafficDistributionRefused reports whether err is the API server's
// refusal of a Service's spec.trafficDistribution.
func trafficDistributionRefused(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	return slices.ContainsFunc(status.Status().Details.Causes, func(c metav1.StatusCause) bool { return c.Field == "spec.trafficDistribution" })
}
