package imports

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/controller/parallel"
	"github.com/mcsd-io/mcsd/internal/topology"
	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// maxEndpointsPerSlice is the most endpoints mcsd puts in one EndpointSlice,
// the Kubernetes EndpointSlice controller's default.
const maxEndpointsPerSlice = 100

// reconcileEndpointSlices makes the import's EndpointSlices those of
// clusterSlices for each source cluster (planSlices): it creates the
// missing ones, updates those whose content differs and deletes the rest.
// A slice whose content is already right is not written. Once all are in
// place, it reports the endpoint records they reflect to the propagation
// metric. It reports whether every
// slice is in place (none waits for the cache to show it). It reads s and
// writes none of it: it runs beside reconcileImport.
func (r *Reconciler) reconcileEndpointSlices(ctx context.Context, s *scope) (bool, error) {
	log := ctrl.LoggerFrom(ctx)
	existing, err := r.listEndpointSlices(ctx, s.key)
	if err != nil {
		return false, err
	}
	endpoints := s.endpoints
	plan := planSlices(s, existing)
	// A slice the cache showed older than this controller's last write of
	// it is left for the next look, once the cache has caught up: a write
	// made from it would conflict. The event of that write, or a recheck
	// when it came while this reconcile ran, brings the import back
	// (echo.Behind); the recheck after cacheLag is the fallback. Its
	// cluster's slices that go stay until then (held).
	// A slice behind that was to gain endpoints holds its cluster's other
	// updates too: they may take those endpoints out (heldUpdates).
	held, heldUpdates := map[string]bool{}, map[string]bool{}
	behind := 0
	isBehind := func(also map[string]bool) func(*discoveryv1.EndpointSlice) bool {
		return func(sl *discoveryv1.EndpointSlice) bool {
			b := r.echoes.Behind(ctx, sl)
			if b {
				behind++
				held[sliceCluster(sl)] = true
				also[sliceCluster(sl)] = true
			}
			return b
		}
	}
	plan.grow = slices.DeleteFunc(plan.grow, isBehind(heldUpdates))
	plan.update = slices.DeleteFunc(plan.update, isBehind(held))
	// One write per slice that differs, all at the same time: a new import
	// from k clusters has k slices, which one after the other took k round
	// trips. A cluster's slices are created, and those that gain an
	// endpoint updated, first; then the other updates; then the deletes,
	// each step only once its previous one is written: an endpoint that
	// moves to another slice (a set grown past a slice, a port added, a
	// set split per port, a slice emptied into the others) is never in
	// none, which kube-proxy would take for gone. A create refused for
	// want of room (a quota on EndpointSlices) holds nothing back: the
	// deletes make the room.
	var creates, updates, removes []sliceWriteOf
	for _, x := range plan.replace {
		// The address type is immutable.
		creates = append(creates, sliceWriteOf{sliceCluster(x.want), func() (sliceWrite, error) {
			if err := r.Client.Delete(ctx, x.have); client.IgnoreNotFound(err) != nil {
				return sliceWrite{}, fmt.Errorf("delete EndpointSlice %s: %w", x.have.Name, err)
			}
			w, err := r.createSlice(ctx, x.want, s.sliceOwners)
			w.deleted = true
			return w, err
		}})
	}
	for _, want := range plan.create {
		creates = append(creates, sliceWriteOf{sliceCluster(want), func() (sliceWrite, error) { return r.createSlice(ctx, want, s.sliceOwners) }})
	}
	update := func(have *discoveryv1.EndpointSlice) sliceWriteOf {
		return sliceWriteOf{sliceCluster(have), func() (sliceWrite, error) {
			sent := slices.ContainsFunc(have.Endpoints, hasNodeHints)
			if err := r.Client.Update(ctx, have); err != nil {
				return sliceWrite{}, fmt.Errorf("update EndpointSlice %s: %w", have.Name, err)
			}
			r.noteNodeHints(sent, have)
			return sliceWrite{updated: true}, nil
		}}
	}
	for _, have := range plan.grow {
		creates = append(creates, update(have))
	}
	for _, have := range plan.update {
		updates = append(updates, update(have))
	}
	for _, have := range plan.remove {
		removes = append(removes, sliceWriteOf{sliceCluster(have), func() (sliceWrite, error) {
			if err := r.Client.Delete(ctx, have); client.IgnoreNotFound(err) != nil {
				return sliceWrite{}, fmt.Errorf("delete EndpointSlice %s: %w", have.Name, err)
			}
			return sliceWrite{deleted: true}, nil
		}})
	}
	// heldUpdates are also the clusters whose creates (and growing
	// updates) did not all land: their other updates may take endpoints
	// out for those slices to carry.
	done, errs := runSliceWrites(creates, nil, heldUpdates, held)
	d, e := runSliceWrites(updates, heldUpdates, held)
	done, errs = append(done, d...), append(errs, e...)
	d, e = runSliceWrites(removes, held)
	done, errs = append(done, d...), append(errs, e...)
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	var created, updated, deleted int
	inPlace := behind == 0
	for _, w := range done {
		switch {
		case w.notCached:
			inPlace = false
		case w.created:
			created++
		case w.updated:
			updated++
		}
		if w.deleted {
			deleted++
		}
	}
	if created+updated+deleted > 0 {
		log.V(1).Info("Wrote EndpointSlices", "created", created, "updated", updated, "deleted", deleted)
	}
	if inPlace {
		var applied []registry.Endpoints
		for _, c := range s.res.Clusters {
			if e, ok := endpoints[c]; ok {
				applied = append(applied, e)
			}
		}
		r.propagation.Applied(s.key, applied)
	}
	return inPlace, nil
}

// sliceWriteOf is one EndpointSlice write of a source cluster's.
type sliceWriteOf struct {
	cluster string
	do      func() (sliceWrite, error)
}

// runSliceWrites makes the writes, all at once, but those of a cluster
// that skip holds; it then holds, in each of hold, the clusters of the
// writes that failed (but for want of room) or found their slice not yet
// cached.
func runSliceWrites(writes []sliceWriteOf, skip map[string]bool, hold ...map[string]bool) ([]sliceWrite, []error) {
	var run []sliceWriteOf
	for _, w := range writes {
		if !skip[w.cluster] {
			run = append(run, w)
		}
	}
	fns := make([]func() (sliceWrite, error), len(run))
	for i, w := range run {
		fns[i] = w.do
	}
	done, errs := parallel.Each(maxSliceWrites, fns)
	for i, w := range done {
		if (errs[i] != nil && !refusedForRoom(errs[i])) || w.notCached {
			for _, h := range hold {
				h[run[i].cluster] = true
			}
		}
	}
	return done, errs
}

// refusedForRoom reports whether err is a write refused by a quota: the
// API server's quota admission says "exceeded quota".
func refusedForRoom(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
}

// sliceCluster is the source cluster of an EndpointSlice of an import.
func sliceCluster(sl *discoveryv1.EndpointSlice) string {
	return sl.Labels[mcsv1beta1.LabelSourceCluster]
}

// maxSliceWrites is how many EndpointSlice writes of one import are made at
// once.
const maxSliceWrites = 8

// sliceWrite is what one EndpointSlice write did.
type sliceWrite struct {
	created, updated, deleted bool
	// notCached: the slice to create exists, but the cache has not seen it.
	notCached bool
}

// createSlice creates want. A slice that exists already is one the cache
// has not seen yet: the import is looked at again soon (its creation event
// may echo this controller's own write, which the controller's watches drop,
// package echo).
func (r *Reconciler) createSlice(ctx context.Context, want *discoveryv1.EndpointSlice, owners []metav1.OwnerReference) (sliceWrite, error) {
	sent := slices.ContainsFunc(want.Endpoints, hasNodeHints)
	err := r.Client.Create(ctx, want)
	if apierrors.IsAlreadyExists(err) {
		if w, ok, err := r.relabelSlice(ctx, want, owners); ok {
			return w, err
		}
		ctrl.LoggerFrom(ctx).V(1).Info("EndpointSlice exists but is not in the cache yet", "endpointSlice", klog.KObj(want))
		return sliceWrite{notCached: true}, nil
	}
	if err != nil {
		return sliceWrite{}, fmt.Errorf("create EndpointSlice %s: %w", want.Name, err)
	}
	r.noteNodeHints(sent, want)
	return sliceWrite{created: true}, nil
}

// relabelSlice takes back want's slice when the cache holds it but the
// import's list did not find it: someone changed or removed the labels it
// is listed by (a hand edit, a mutating policy), and its name is taken. One
// of the import's (a controller reference among owners) is written as
// wanted, its labels with it; ok is false when the cache does not hold it
// (it is not cached yet).
func (r *Reconciler) relabelSlice(ctx context.Context, want *discoveryv1.EndpointSlice, owners []metav1.OwnerReference) (sliceWrite, bool, error) {
	have := &discoveryv1.EndpointSlice{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil || sliceLabelsAndOwnerHold(have, want.Labels, owners) {
		// Not cached yet, or cached since the list (this controller's own
		// create, say): looked at again soon.
		return sliceWrite{}, false, nil
	}
	if !slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return hasControllerRef(have, o) }) {
		return sliceWrite{}, true, fmt.Errorf("EndpointSlice %s exists and is not this import's: %w", want.Name, errSliceNameTaken)
	}
	if have.AddressType != want.AddressType {
		// Immutable: written at the next look, once deleted.
		if err := r.Client.Delete(ctx, have); client.IgnoreNotFound(err) != nil {
			return sliceWrite{}, true, fmt.Errorf("delete EndpointSlice %s: %w", have.Name, err)
		}
		return sliceWrite{deleted: true, notCached: true}, true, nil
	}
	ctrl.LoggerFrom(ctx).Info("Taking back an EndpointSlice whose labels were changed", "endpointSlice", klog.KObj(have), "labels", have.Labels)
	applySlice(have, want)
	if err := r.Client.Update(ctx, have); err != nil {
		return sliceWrite{}, true, fmt.Errorf("update EndpointSlice %s: %w", have.Name, err)
	}
	return sliceWrite{updated: true}, true, nil
}

// errSliceNameTaken: an EndpointSlice of the name an import's slice needs
// exists, and is not the import's.
var errSliceNameTaken = errors.New("EndpointSlice name taken")

// setSliceOwners sets the controller references the import's EndpointSlices
// may have: first the one new slices get, the derived Service of a
// ClusterSetIP import (so that they need not wait for a new ServiceImport)
// or else the ServiceImport; then, for a ClusterSetIP import, the
// ServiceImport too (slices written while there was no derived Service, or
// by an mcsd that made the ServiceImport their owner), which is kept rather
// than rewritten. A headless import's slices are the ServiceImport's alone,
// and so are those of a derived Service about to be replaced (replacing),
// so that deleting it does not take them with it. It is called before the phases that run at the same
// time as the slices' may change s.si or s.svc.
func setSliceOwners(s *scope, replacing bool) {
	s.sliceOwners = nil
	if s.res.Spec.Type == mcsv1beta1.ClusterSetIP && s.svc != nil && !replacing {
		s.sliceOwners = append(s.sliceOwners, *metav1.NewControllerRef(s.svc, corev1.SchemeGroupVersion.WithKind("Service")))
	}
	if s.si != nil {
		s.sliceOwners = append(s.sliceOwners, ownerRef(s.si))
	}
}

// clusterSlices returns the EndpointSlices of s's import for one exporting
// cluster (this one included) given its endpoints: one set of slices per
// address type and port list, each with at most maxEndpointsPerSlice
// endpoints, each endpoint kept in the slice of have (the cluster's
// existing slices) that holds it (packChunks). A slice
// carries only the ports its cluster serves (merge.Result.Served) under the
// import's port names, with the cluster's own port numbers; the slices of a
// cluster that serves none of the import's ports list its endpoints without
// ports, so that kube-proxy sends them no traffic for the import (a
// headless import leaves such endpoints out: DNS would name them). Only
// the import's IP families are listed (all, while it names none). For
// each IP family of the import that the cluster has no endpoints of (or
// no endpoints record yet, or none listed), it gets one empty slice of that
// address type, without ports, as Kubernetes' EndpointSlice controller
// keeps a placeholder. Endpoints whose hints differ by port get a set of slices for
// each set of ports hinted alike (topology.Hints.PortSets).
func clusterSlices(s *scope, cluster string, endpoints registry.Endpoints, have []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	importPorts := s.res.Spec.Ports
	headless := s.res.Spec.Type == mcsv1beta1.Headless
	served := s.res.Served[cluster]
	families := familyAddressTypes(s.res.Spec.IPFamilies)
	// Groups whose served ports are the same share slices.
	type set struct {
		addressType discoveryv1.AddressType
		ports       []discoveryv1.EndpointPort
		endpoints   []discoveryv1.Endpoint
	}
	sets := map[string]*set{}
	has := map[discoveryv1.AddressType]bool{} // families the cluster has endpoints of
	for _, g := range endpoints.Groups {
		if len(families) > 0 && !slices.Contains(families, g.AddressType) {
			// A family the import does not have: its clients cannot ask
			// for it, and a headless import's DNS would answer with these
			// endpoints alone (merge: no IPFamilyConflict for it).
			continue
		}
		ports := slicePorts(g.Ports, served, importPorts)
		if headless && len(importPorts) > 0 && len(ports) == 0 {
			// DNS answers with every endpoint of a headless import's
			// slices, ports or not: endpoints that serve none of its ports
			// are left out, so that no name leads to them.
			continue
		}
		has[g.AddressType] = has[g.AddressType] || len(g.Endpoints) > 0
		var parts [][]discoveryv1.EndpointPort
		for _, set := range s.hints.PortSets(cluster, hintPorts(g.AddressType, ports)) {
			part := make([]discoveryv1.EndpointPort, len(set))
			for i, j := range set {
				part[i] = ports[j]
			}
			parts = append(parts, part)
		}
		for _, ports := range parts {
			id := string(g.AddressType) + "|" + portsID(ports)
			st := sets[id]
			if st == nil {
				st = &set{addressType: g.AddressType, ports: ports}
				sets[id] = st
			}
			hinted := hintPorts(g.AddressType, ports)
			for _, e := range g.Endpoints {
				ep := sliceEndpoint(e, cluster == s.localCluster)
				ep.Hints = s.hints.For(cluster, hinted, e)
				st.endpoints = append(st.endpoints, ep)
			}
		}
	}
	var out []*discoveryv1.EndpointSlice
	for _, at := range families {
		if !has[at] {
			out = append(out, newSlice(s, cluster, string(at)+"|", 0, at, nil, nil))
		}
	}
	haveByName := make(map[string]*discoveryv1.EndpointSlice, len(have))
	for _, sl := range have {
		haveByName[sl.Name] = sl
	}
	for _, id := range slices.Sorted(maps.Keys(sets)) {
		st := sets[id]
		slices.SortFunc(st.endpoints, compareEndpoints)
		// The chunks of the set that exist, and what they hold: looked
		// for among as many chunk numbers as the cluster has slices and
		// the set could need (new chunks take the lowest free numbers).
		held := map[int]map[string]bool{}
		for chunk := range len(have) + (len(st.endpoints)+maxEndpointsPerSlice-1)/maxEndpointsPerSlice {
			sl := haveByName[sliceName(s.key.Name, cluster, id, chunk)]
			if sl == nil || sl.AddressType != st.addressType {
				continue
			}
			held[chunk] = map[string]bool{}
			for _, e := range sl.Endpoints {
				held[chunk][endpointKey(e)] = true
			}
		}
		chunks := packChunks(st.endpoints, held, maxEndpointsPerSlice)
		for _, chunk := range slices.Sorted(maps.Keys(chunks)) {
			out = append(out, newSlice(s, cluster, id, chunk, st.addressType, chunks[chunk], st.ports))
		}
	}
	return out
}

// endpointKey tells an endpoint apart from the others of a set: its
// addresses.
func endpointKey(e discoveryv1.Endpoint) string { return strings.Join(e.Addresses, ",") }

// packChunks places eps (sorted) in numbered chunks of at most max, as
// Kubernetes' EndpointSlice controller keeps endpoints where they are: an
// endpoint that chunk c holds now (held[c], by endpointKey) stays in c; the
// others go, in order, to the chunks held with room, lowest first, then to
// new chunks at the lowest free numbers. A change of one endpoint so
// changes one slice. Endpoints move from one existing chunk to others only
// when it can go: when fewer chunks can hold them all (the emptiest
// goes); reconcileEndpointSlices writes the slices that gain endpoints
// before those that lose some. It returns
// the endpoints of each chunk that holds any (each in eps's order); a held
// chunk left empty is not returned.
func packChunks(eps []discoveryv1.Endpoint, held map[int]map[string]bool, max int) map[int][]discoveryv1.Endpoint {
	numbers := slices.Sorted(maps.Keys(held))
	where := map[string]int{} // the lowest chunk that holds each key
	for _, chunk := range slices.Backward(numbers) {
		for k := range held[chunk] {
			where[k] = chunk
		}
	}
	out := map[int][]discoveryv1.Endpoint{}
	var rest []discoveryv1.Endpoint
	for _, e := range eps {
		if chunk, ok := where[endpointKey(e)]; ok && len(out[chunk]) < max {
			out[chunk] = append(out[chunk], e)
		} else {
			rest = append(rest, e)
		}
	}
	// More chunks in use than the endpoints need: the emptiest (the
	// highest numbered of equals) goes, its endpoints to the others. The
	// count stays the least the endpoints need, and a chunk is emptied
	// only when the others can take every endpoint.
	dissolved := map[int]bool{}
	for {
		used := slices.DeleteFunc(slices.Clone(numbers), func(c int) bool { return len(out[c]) == 0 })
		if len(used) <= (len(eps)+max-1)/max {
			break
		}
		least := used[len(used)-1]
		for _, c := range slices.Backward(used) {
			if len(out[c]) < len(out[least]) {
				least = c
			}
		}
		rest = append(rest, out[least]...)
		delete(out, least)
		dissolved[least] = true
	}
	slices.SortFunc(rest, compareEndpoints)
	// The others fill the chunks in use, then those held empty, lowest
	// first.
	fill := slices.DeleteFunc(slices.Clone(numbers), func(c int) bool { return len(out[c]) == 0 })
	fill = append(fill, slices.DeleteFunc(slices.Clone(numbers), func(c int) bool { return len(out[c]) > 0 || dissolved[c] })...)
	for _, chunk := range fill {
		n := min(max-len(out[chunk]), len(rest))
		if n > 0 {
			out[chunk] = append(out[chunk], rest[:n]...)
			rest = rest[n:]
		}
	}
	for chunk := 0; len(rest) > 0; chunk++ {
		if _, ok := held[chunk]; ok {
			continue
		}
		n := min(max, len(rest))
		out[chunk] = rest[:n:n]
		rest = rest[n:]
	}
	for chunk, eps := range out {
		if len(eps) == 0 {
			delete(out, chunk)
		} else {
			slices.SortFunc(eps, compareEndpoints)
		}
	}
	return out
}

// newSlice is the chunk-th EndpointSlice of the import's set id from cluster.
func newSlice(s *scope, cluster, id string, chunk int, at discoveryv1.AddressType, eps []discoveryv1.Endpoint, ports []discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       s.key.Namespace,
			Name:            sliceName(s.key.Name, cluster, id, chunk),
			Labels:          sliceLabels(s, cluster),
			Annotations:     map[string]string{wellknown.AnnotationManaged: "true"},
			OwnerReferences: []metav1.OwnerReference{s.sliceOwners[0]},
		},
		AddressType: at,
		Endpoints:   eps,
		Ports:       ports,
	}
}

// familyAddressTypes returns the EndpointSlice address types of the import's
// IP families, in their order.
func familyAddressTypes(families []corev1.IPFamily) []discoveryv1.AddressType {
	var out []discoveryv1.AddressType
	for _, f := range families {
		switch f {
		case corev1.IPv4Protocol:
			out = append(out, discoveryv1.AddressTypeIPv4)
		case corev1.IPv6Protocol:
			out = append(out, discoveryv1.AddressTypeIPv6)
		}
	}
	return out
}

// sliceLabels are the labels of the import's slices from cluster. Only a
// ClusterSetIP import's slices name a Service for kube-proxy: the derived
// one, unless a Service mcsd did not create holds its name (then kube-proxy
// must not send that Service's traffic to the import's endpoints).
func sliceLabels(s *scope, cluster string) map[string]string {
	l := map[string]string{
		mcsv1beta1.LabelServiceName:   s.key.Name,
		mcsv1beta1.LabelSourceCluster: cluster,
		discoveryv1.LabelManagedBy:    wellknown.ManagedBy,
	}
	if s.res.Spec.Type == mcsv1beta1.ClusterSetIP && s.foreignSvc == nil {
		l[discoveryv1.LabelServiceName] = s.derivedName
	}
	return l
}

// slicePorts returns the ports of a cluster's endpoint group that its
// slices carry: for each import port the cluster serves, in import order,
// the group's port of the same name and protocol, with its number.
func slicePorts(groupPorts []registry.EndpointPort, served []string, importPorts []mcsv1beta1.ServicePort) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for _, ip := range importPorts {
		if !slices.Contains(served, ip.Name) {
			continue
		}
		proto := registry.ProtocolOrTCP(ip.Protocol)
		i := slices.IndexFunc(groupPorts, func(p registry.EndpointPort) bool {
			return p.Name == ip.Name && registry.ProtocolOrTCP(p.Protocol) == proto
		})
		if i < 0 {
			continue
		}
		gp := groupPorts[i]
		out = append(out, discoveryv1.EndpointPort{
			Name:        ptr.To(ip.Name),
			Protocol:    ptr.To(proto),
			Port:        ptr.To(gp.Port),
			AppProtocol: cloneString(gp.AppProtocol),
		})
	}
	return out
}

// hintPorts are the topology.Ports under which kube-proxy finds the
// endpoints of a slice of address type at with ports.
func hintPorts(at discoveryv1.AddressType, ports []discoveryv1.EndpointPort) []topology.Port {
	out := make([]topology.Port, len(ports))
	for i, p := range ports {
		out[i] = topology.Port{AddressType: at, Name: ptr.Deref(p.Name, ""), Protocol: ptr.Deref(p.Protocol, corev1.ProtocolTCP)}
	}
	return out
}

// portsID identifies a port list in slice names.
func portsID(ports []discoveryv1.EndpointPort) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprintf("%s/%s/%d/%s", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.AppProtocol, ""))
	}
	return strings.Join(s, ",")
}

// sliceEndpoint copies a registry endpoint into an EndpointSlice endpoint:
// addresses, conditions, hostname (headless DNS names depend on it) and
// zone. The node name is kept only for this cluster's own endpoints: another
// cluster's node name means nothing here, and kube-proxy would take an
// endpoint on a node of the same name for a local one
// (internalTrafficPolicy: Local).
func sliceEndpoint(e registry.Endpoint, local bool) discoveryv1.Endpoint {
	nodeName := ""
	if local {
		nodeName = e.NodeName
	}
	return discoveryv1.Endpoint{
		Addresses: slices.Clone(e.Addresses),
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr.To(e.Ready),
			Serving:     ptr.To(e.Serving),
			Terminating: ptr.To(e.Terminating),
		},
		Hostname: optional(e.Hostname),
		NodeName: optional(nodeName),
		Zone:     optional(e.Zone),
	}
}

// compareEndpoints orders endpoints by addresses, then the other fields, so
// that the split into slices does not depend on the registry's order.
func compareEndpoints(a, b discoveryv1.Endpoint) int {
	return cmp.Or(
		slices.Compare(a.Addresses, b.Addresses),
		strings.Compare(ptr.Deref(a.Hostname, ""), ptr.Deref(b.Hostname, "")),
		strings.Compare(ptr.Deref(a.NodeName, ""), ptr.Deref(b.NodeName, "")),
		strings.Compare(ptr.Deref(a.Zone, ""), ptr.Deref(b.Zone, "")),
		strings.Compare(conditionsKey(a.Conditions), conditionsKey(b.Conditions)),
	)
}

func conditionsKey(c discoveryv1.EndpointConditions) string {
	b := func(p *bool) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatBool(*p)
	}
	return b(c.Ready) + b(c.Serving) + b(c.Terminating)
}

// sliceUpToDate reports whether the existing slice have already holds what
// mcsd wants in it: its labels and annotations (others may add more; the
// digest of its inputs may be stale, which costs each reconcile until the
// slice's next write a comparison, not a write), its controller reference,
// address type, ports and endpoints (in any order), with or without their
// node hints where the API server drops them (nodeHintsDropped).
func sliceUpToDate(have, want *discoveryv1.EndpointSlice, owners []metav1.OwnerReference, nodeHintsDropped bool) bool {
	for k, v := range want.Annotations {
		if got, ok := have.Annotations[k]; k != wellknown.AnnotationSliceInputs && (!ok || got != v) {
			return false
		}
	}
	if !sliceLabelsAndOwnerHold(have, want.Labels, owners) || have.AddressType != want.AddressType ||
		!equality.Semantic.DeepEqual(normalSlicePorts(have.Ports), normalSlicePorts(want.Ports)) {
		return false
	}
	haveEndpoints := sortedEndpoints(have.Endpoints)
	// Where the API server drops node hints, a slice without them is as
	// wanted too (one with them, as a server that keeps them again wrote
	// it, as well).
	return equality.Semantic.DeepEqual(haveEndpoints, sortedEndpoints(want.Endpoints)) ||
		(nodeHintsDropped && equality.Semantic.DeepEqual(haveEndpoints, sortedEndpoints(withoutNodeHints(want.Endpoints))))
}

// sliceLabelsAndOwnerHold reports whether have carries labels (others may
// add more; no kubernetes.io/service-name when labels has none) and a
// controller reference among owners.
func sliceLabelsAndOwnerHold(have *discoveryv1.EndpointSlice, labels map[string]string, owners []metav1.OwnerReference) bool {
	for k, v := range labels {
		if got, ok := have.Labels[k]; !ok || got != v {
			return false
		}
	}
	if _, ok := have.Labels[discoveryv1.LabelServiceName]; ok && labels[discoveryv1.LabelServiceName] == "" {
		return false
	}
	return slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return hasControllerRef(have, o) })
}

// hasNodeHints reports whether e carries node hints.
func hasNodeHints(e discoveryv1.Endpoint) bool { return e.Hints != nil && len(e.Hints.ForNodes) > 0 }

// withoutNodeHints returns endpoints without their node hints: what an API
// server without node hints (Kubernetes before 1.34 by default) keeps of
// them.
func withoutNodeHints(endpoints []discoveryv1.Endpoint) []discoveryv1.Endpoint {
	if !slices.ContainsFunc(endpoints, hasNodeHints) {
		return endpoints
	}
	out := make([]discoveryv1.Endpoint, len(endpoints))
	for i, e := range endpoints {
		if e.Hints != nil {
			h := *e.Hints
			h.ForNodes = nil
			e.Hints = &h
		}
		out[i] = e
	}
	return out
}

// noteNodeHints learns from the answer to the write of a slice that
// carried node hints (sent) whether the API server keeps them: a slice
// written without them is otherwise never as wanted, and is written at
// every reconcile. A slice that carries none cannot tell a server that
// drops them from one that was never asked to keep them (an import that
// has just been asked to prefer the client's node): those are compared
// whole until a write says otherwise.
func (r *Reconciler) noteNodeHints(sent bool, got *discoveryv1.EndpointSlice) {
	if sent {
		r.nodeHintsDropped.Store(!slices.ContainsFunc(got.Endpoints, hasNodeHints))
	}
}

// applySlice sets in have what mcsd owns of want (see sliceUpToDate).
func applySlice(have, want *discoveryv1.EndpointSlice) {
	if have.Labels == nil {
		have.Labels = map[string]string{}
	}
	if _, ok := want.Labels[discoveryv1.LabelServiceName]; !ok {
		delete(have.Labels, discoveryv1.LabelServiceName)
	}
	maps.Copy(have.Labels, want.Labels)
	if have.Annotations == nil {
		have.Annotations = map[string]string{}
	}
	maps.Copy(have.Annotations, want.Annotations)
	setControllerRef(have, want.OwnerReferences[0])
	have.Ports = want.Ports
	have.Endpoints = want.Endpoints
}

// normalSlicePorts returns ports with API defaults spelled out (name "",
// protocol TCP), sorted.
func normalSlicePorts(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, len(ports))
	for i, p := range ports {
		if p.Name == nil {
			p.Name = ptr.To("")
		}
		if p.Protocol == nil {
			p.Protocol = ptr.To(corev1.ProtocolTCP)
		}
		if p.AppProtocol != nil && *p.AppProtocol == "" {
			p.AppProtocol = nil
		}
		out[i] = p
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointPort) int {
		return cmp.Or(strings.Compare(*a.Name, *b.Name), strings.Compare(string(*a.Protocol), string(*b.Protocol)),
			cmp.Compare(ptr.Deref(a.Port, 0), ptr.Deref(b.Port, 0)))
	})
	return out
}

func sortedEndpoints(eps []discoveryv1.Endpoint) []discoveryv1.Endpoint {
	out := slices.Clone(eps)
	slices.SortFunc(out, compareEndpoints)
	return out
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func cloneString(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return ptr.To(*s)
}

// listEndpointSlices lists the EndpointSlices mcsd wrote for key.
func (r *Reconciler) listEndpointSlices(ctx context.Context, key registry.ServiceKey) ([]discoveryv1.EndpointSlice, error) {
	return r.listSlicesBy(ctx, key, wellknown.ManagedBy)
}

// listSlicesBy lists the EndpointSlices of the import key that managedBy
// (mcsd, or the AWS controller) wrote.
func (r *Reconciler) listSlicesBy(ctx context.Context, key registry.ServiceKey, managedBy string) ([]discoveryv1.EndpointSlice, error) {
	list := &discoveryv1.EndpointSliceList{}
	opts := []client.ListOption{client.InNamespace(key.Namespace), client.MatchingLabels{
		mcsv1beta1.LabelServiceName: key.Name,
		discoveryv1.LabelManagedBy:  managedBy,
	}}
	if r.slicesIndexed && managedBy == wellknown.ManagedBy {
		// The same slices, found through the index rather than by matching
		// the labels of every slice in the namespace.
		opts = append(opts, client.MatchingFields{sliceIndex: key.Name})
	}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("list EndpointSlices managed by %s: %w", managedBy, err)
	}
	return list.Items, nil
}
