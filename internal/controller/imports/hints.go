package imports

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
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
	for _, c := range s.res.Clusters {
		for _, g := range s.endpoints[c].Groups {
			in.Endpoints[c] = append(in.Endpoints[c], g.Endpoints...)
		}
	}
	if !in.Headless && topology.NeedsLocalZones(in.Preference) {
		zones, err := r.nodeZones(ctx)
		if err != nil {
			return err
		}
		in.LocalZones = zones
		served := s.res.Served[s.localCluster]
		for _, g := range s.endpoints[s.localCluster].Groups {
			ports := hintPorts(g.AddressType, slicePorts(g.Ports, served, s.res.Spec.Ports))
			in.LocalGroups = append(in.LocalGroups, topology.Group{Ports: ports, Endpoints: g.Endpoints})
		}
	}
	s.hints = topology.Plan(in)
	return nil
}

// zoneBook keeps the zone of every node of this cluster, from the Node
// watch, so that a reconcile reads the cluster's zones without listing the
// nodes, and only a change of the set of zones brings the imports that
// name them back.
type zoneBook struct {
	mu     sync.Mutex
	byNode map[string]string
	// nodes counts the nodes of each zone: an event costs a look-up, not
	// a pass over every node.
	nodes map[string]int
	seen  bool // a node event has come
}

// set records node's zone ("" when deleted or unlabelled) and reports
// whether the cluster's set of zones changed.
func (b *zoneBook) set(node, zone string, deleted bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seen = true
	old, had := b.byNode[node]
	if had && !deleted && old == zone {
		return false // a status or heartbeat update: a map look-up
	}
	if b.byNode == nil {
		b.byNode, b.nodes = map[string]string{}, map[string]int{}
	}
	changed := false
	if had {
		delete(b.byNode, node)
		if old != "" {
			if b.nodes[old]--; b.nodes[old] == 0 {
				delete(b.nodes, old)
				changed = true
			}
		}
	}
	if !deleted {
		b.byNode[node] = zone
		if zone != "" {
			if b.nodes[zone]++; b.nodes[zone] == 1 {
				changed = true
			}
		}
	}
	return changed
}

// zones returns the cluster's zones, sorted; false before any node event.
func (b *zoneBook) zones() ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.nodes)), b.seen
}

// nodeZones returns the zones of this cluster's nodes: from the Node
// watch's book, or, before its first event, from the cache's metadata-only
// view of the Nodes.
func (r *Reconciler) nodeZones(ctx context.Context) ([]string, error) {
	if zones, ok := r.zones.zones(); ok {
		return zones, nil
	}
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

// nodeMetadata is the Node watch's kind: their metadata alone, where the
// zone label is.
func nodeMetadata() *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}}
}

// nodeHandler keeps the zone book from the Node watch and, when the set of
// the cluster's zones changes, brings back the imports that prefer their
// own cluster: their hints name those zones. Node updates that leave the
// zone label alone (status, heartbeats) cost a map look-up.
func (r *Reconciler) nodeHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	update := func(ctx context.Context, o client.Object, deleted bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if !r.zones.set(o.GetName(), o.GetLabels()[corev1.LabelTopologyZone], deleted) {
			return
		}
		for _, req := range r.importsPreferringTheirCluster(ctx) {
			q.Add(req)
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			update(ctx, e.Object, false, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			update(ctx, e.ObjectNew, false, q)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			update(ctx, e.Object, true, q)
		},
	}
}

// importsPreferringTheirCluster lists, from the manager's cache, the
// ClusterSetIP imports that prefer their own cluster.
func (r *Reconciler) importsPreferringTheirCluster(ctx context.Context) []reconcile.Request {
	list := &mcsv1beta1.ServiceImportList{}
	// Read, not kept or changed: the cache's own objects, not copies.
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot list ServiceImports to reconcile after the nodes' zones changed")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		si := &list.Items[i]
		// A headless import has no hints: zones change nothing there.
		if isManaged(si) && si.Spec.Type != mcsv1beta1.Headless && topology.NeedsLocalZones(si.Annotations[topology.AnnotationPreference]) {
			reqs = append(reqs, request(si.Namespace, si.Name))
		}
	}
	return reqs
}
