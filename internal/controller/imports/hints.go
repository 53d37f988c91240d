package imports

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/topology"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// planHints decides the topology hints of s's import (topology.Plan) from
// the endpoints its slices hold and, for the same-cluster preference only,
// the zones of this cluster's nodes.
func (r *Reconciler) planHints(ctx context.Context, s *scope) error {
	in := topology.Input{
		Headless:     s.res.Spec.Type == mcsv1beta1.Headless,
		Preference:   s.res.Annotations[topology.AnnotationPreference],
		LocalCluster: s.localCluster,
		Endpoints:    map[string][]registry.Endpoint{},
	}
	if td := s.res.Spec.TrafficDistribution; td != nil {
		in.TrafficDistribution = *td
	}
	if in.TrafficDistribution == "" && in.Preference == "" {
		s.hints = topology.Hints{}
		return nil
	}
	endpoints := r.View.Endpoints(s.key)
	for _, c := range s.res.Clusters {
		for _, g := range endpoints[c].Groups {
			in.Endpoints[c] = append(in.Endpoints[c], g.Endpoints...)
		}
	}
	if topology.NeedsLocalZones(in.Preference) {
		zones, err := r.nodeZones(ctx)
		if err != nil {
			return err
		}
		in.LocalZones = zones
	}
	s.hints = topology.Plan(in)
	return nil
}

// nodeZones lists the zones of this cluster's nodes, from the cache's
// metadata-only view of the Nodes.
func (r *Reconciler) nodeZones(ctx context.Context) ([]string, error) {
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.Client.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var zones []string
	for _, n := range nodes.Items {
		if z := n.Labels[corev1.LabelTopologyZone]; z != "" {
			zones = append(zones, z)
		}
	}
	slices.Sort(zones)
	return slices.Compact(zones), nil
}

// zoneChanged lets through the Node events that can change the cluster's
// zones: a node created or deleted, or its zone label changed (not the
// status and heartbeat updates of every node).
var zoneChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetLabels()[corev1.LabelTopologyZone] != e.ObjectNew.GetLabels()[corev1.LabelTopologyZone]
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// nodeToImports maps a change of the cluster's zones to the imports that
// prefer their own cluster: their hints name those zones. The
// ServiceImports are listed from the manager's cache.
func (r *Reconciler) nodeToImports(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &mcsv1beta1.ServiceImportList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list ServiceImports to reconcile after the nodes' zones changed")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		si := &list.Items[i]
		if isManaged(si) && topology.NeedsLocalZones(si.Annotations[topology.AnnotationPreference]) {
			reqs = append(reqs, request(si.Namespace, si.Name))
		}
	}
	return reqs
}
