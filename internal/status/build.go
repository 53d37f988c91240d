package status

import (
	"cmp"
	"maps"
	"slices"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/merge"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// Snapshot is the registry's state as one full update delivers it.
type Snapshot struct {
	Exports   []registry.Export
	Endpoints []registry.Endpoints
	Clusters  []registry.Cluster
	// Rejected are the records readers refuse; Exports and Endpoints hold
	// none of their clusters' records of their Services.
	Rejected []registry.Rejection
}

// LocalObjects is what Collect reads from the local cluster.
type LocalObjects struct {
	// Cluster is the local cluster's id, "" when not known.
	Cluster string
	Exports []mcsv1beta1.ServiceExport
	Imports []mcsv1beta1.ServiceImport
	// Slices are the EndpointSlices mcsd wrote for imports.
	Slices []discoveryv1.EndpointSlice
}

// Input is everything a Report is built from.
type Input struct {
	ClusterSet string
	// Namespace limits the services and local objects; "" for all.
	Namespace string
	// Time is when the registry was read.
	Time     time.Time
	Snapshot Snapshot
	// Leases are the clusters' leases, when the backend has them.
	Leases []registry.Lease
	// LeaseAudit counts the registry's leases, when any client of it may
	// grant them; nil otherwise.
	LeaseAudit *LeaseAudit
	// Local is nil without a local cluster.
	Local    *LocalObjects
	Warnings []string
}

// Build makes the Report of in. It is pure: the report depends on in only.
func Build(in Input) Report {
	r := Report{
		ClusterSet: in.ClusterSet,
		Namespace:  in.Namespace,
		Time:       in.Time.UTC(),
		Clusters:   []Cluster{},
		Services:   []Service{},
		Warnings:   append([]string{}, in.Warnings...),
		Leases:     in.LeaseAudit,
	}
	local := ""
	if in.Local != nil {
		local = in.Local.Cluster
	}

	for _, rej := range in.Snapshot.Rejected {
		if in.Namespace == "" || rej.Record.Service.Namespace == in.Namespace {
			r.Warnings = append(r.Warnings, rej.String()+": no cluster imports its cluster's records of that Service")
		}
	}

	// Services, from the exports and endpoints of the namespace.
	exports := map[registry.ServiceKey][]registry.Export{}
	for _, x := range in.Snapshot.Exports {
		if in.Namespace == "" || x.Service.Namespace == in.Namespace {
			exports[x.Service] = append(exports[x.Service], x)
		}
	}
	endpoints := map[registry.RecordID]registry.Endpoints{}
	for _, e := range in.Snapshot.Endpoints {
		endpoints[registry.RecordID{Cluster: e.Cluster, Service: e.Service}] = e
	}
	counts := map[string]int{}
	for _, key := range slices.SortedFunc(maps.Keys(exports), registry.ServiceKey.Compare) {
		svc := buildService(key, exports[key], endpoints)
		for _, x := range svc.Exports {
			counts[x.Cluster]++
		}
		r.Services = append(r.Services, svc)
	}
	byKey := map[registry.ServiceKey]*Service{}
	for i := range r.Services {
		byKey[registry.ServiceKey{Namespace: r.Services[i].Namespace, Name: r.Services[i].Name}] = &r.Services[i]
	}

	// Clusters, with their leases or heartbeats.
	leases := map[string]registry.Lease{}
	for _, l := range in.Leases {
		leases[l.Cluster] = l
	}
	for _, c := range in.Snapshot.Clusters {
		r.Clusters = append(r.Clusters, buildCluster(c, leases, r.Time, c.ID == local, counts[c.ID]))
	}
	slices.SortFunc(r.Clusters, func(a, b Cluster) int { return cmp.Compare(a.ID, b.ID) })

	if in.Local != nil {
		r.Local = buildLocal(in, byKey)
	}
	return r
}

func buildService(key registry.ServiceKey, exports []registry.Export, endpoints map[registry.RecordID]registry.Endpoints) Service {
	res := merge.Merge(exports)
	svc := Service{
		Namespace: key.Namespace,
		Name:      key.Name,
		Import: Import{
			Type:     string(res.Spec.Type),
			Ports:    []Port{},
			Clusters: slices.Clone(res.Clusters),
		},
		Exports: []Export{},
	}
	for _, p := range res.Spec.Ports {
		svc.Import.Ports = append(svc.Import.Ports, Port{Name: p.Name, Protocol: string(p.Protocol), Port: p.Port, AppProtocol: deref(p.AppProtocol)})
	}
	byCluster := map[string]registry.Export{}
	for _, x := range exports {
		byCluster[x.Cluster] = x
	}
	for i, cluster := range res.Clusters {
		x := byCluster[cluster]
		e := Export{Cluster: cluster, Rank: i + 1, Type: string(x.Spec.Type), Ports: []Port{}}
		for _, p := range x.Spec.Ports {
			e.Ports = append(e.Ports, Port{Name: p.Name, Protocol: string(registry.ProtocolOrTCP(p.Protocol)), Port: p.Port, AppProtocol: deref(p.AppProtocol)})
		}
		if eps, ok := endpoints[registry.RecordID{Cluster: cluster, Service: key}]; ok {
			e.Endpoints = countEndpoints(eps)
			if eps.Updated.After(svc.Import.Published) {
				svc.Import.Published = eps.Updated.UTC()
			}
		}
		svc.Exports = append(svc.Exports, e)
	}
	if len(res.Conflict.Reasons) > 0 {
		c := &Conflict{Winner: res.Clusters[0], Reasons: []string{}, Message: res.Conflict.Message}
		for _, reason := range res.Conflict.Reasons {
			c.Reasons = append(c.Reasons, string(reason))
			if w, ok := res.Conflict.Winners[reason]; ok {
				if c.Winners == nil {
					c.Winners = map[string]string{}
				}
				c.Winners[string(reason)] = w
			}
		}
		svc.Conflict = c
	}
	return svc
}

func countEndpoints(eps registry.Endpoints) *Endpoints {
	out := &Endpoints{}
	if !eps.Updated.IsZero() {
		out.Updated = eps.Updated.UTC()
	}
	for _, g := range eps.Groups {
		for _, e := range g.Endpoints {
			out.Total += len(e.Addresses)
			if e.Ready {
				out.Ready += len(e.Addresses)
			}
		}
	}
	return out
}

func buildCluster(c registry.Cluster, leases map[string]registry.Lease, now time.Time, local bool, exports int) Cluster {
	out := Cluster{ID: c.ID, Local: local, Exports: exports, TTLSeconds: c.TTL.Seconds()}
	if !c.Since.IsZero() {
		out.Since = c.Since.UTC()
	}
	if l, ok := leases[c.ID]; ok {
		out.Liveness = LivenessLease
		out.Lease = l.ID
		out.LastSeen = l.Renewed.UTC()
		out.Expires = now.Add(l.Remaining)
		out.TTLSeconds = l.Granted.Seconds()
		return out
	}
	if !c.LastSeen.IsZero() {
		out.Liveness = LivenessHeartbeat
		out.LastSeen = c.LastSeen.UTC()
		if c.TTL > 0 {
			out.Expires = out.LastSeen.Add(c.TTL)
		}
	}
	return out
}

func buildLocal(in Input, services map[registry.ServiceKey]*Service) *Local {
	l := &Local{Cluster: in.Local.Cluster, Exports: []LocalExport{}, Imports: []LocalImport{}}
	inNamespace := func(ns string) bool { return in.Namespace == "" || ns == in.Namespace }

	for _, se := range in.Local.Exports {
		if !inNamespace(se.Namespace) {
			continue
		}
		e := LocalExport{Namespace: se.Namespace, Name: se.Name, Conditions: []Condition{}}
		for _, c := range se.Status.Conditions {
			e.Conditions = append(e.Conditions, condition(c))
		}
		if svc := services[registry.ServiceKey{Namespace: se.Namespace, Name: se.Name}]; svc != nil && l.Cluster != "" {
			e.InRegistry = slices.Contains(svc.Import.Clusters, l.Cluster)
		}
		l.Exports = append(l.Exports, e)
	}
	slices.SortFunc(l.Exports, func(a, b LocalExport) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})

	bySvc := map[registry.ServiceKey][]discoveryv1.EndpointSlice{}
	for _, s := range in.Local.Slices {
		key := registry.ServiceKey{Namespace: s.Namespace, Name: s.Labels[mcsv1beta1.LabelServiceName]}
		bySvc[key] = append(bySvc[key], s)
	}
	for _, si := range in.Local.Imports {
		if !inNamespace(si.Namespace) {
			continue
		}
		key := registry.ServiceKey{Namespace: si.Namespace, Name: si.Name}
		l.Imports = append(l.Imports, buildLocalImport(si, bySvc[key], services[key]))
	}
	sortLocalImports(l.Imports)
	return l
}

func buildLocalImport(si mcsv1beta1.ServiceImport, eps []discoveryv1.EndpointSlice, svc *Service) LocalImport {
	li := LocalImport{
		Namespace:      si.Namespace,
		Name:           si.Name,
		Type:           string(si.Spec.Type),
		Clusters:       []string{},
		EndpointSlices: len(eps),
		LastChange:     lastWrite(si.ObjectMeta),
		Differs:        []string{},
	}
	for _, c := range si.Status.Clusters {
		li.Clusters = append(li.Clusters, c.Cluster)
	}
	for _, c := range si.Status.Conditions {
		if c.Type == string(mcsv1beta1.ServiceImportConditionReady) {
			rc := condition(c)
			li.Ready = &rc
		}
	}
	for _, s := range eps {
		for _, e := range s.Endpoints {
			li.Endpoints += len(e.Addresses)
		}
		if t := lastWrite(s.ObjectMeta); t.After(li.LastChange) {
			li.LastChange = t
		}
	}
	if svc == nil {
		li.Differs = append(li.Differs, "withdrawn")
		return li
	}
	li.Published = svc.Import.Published
	if li.Type != svc.Import.Type {
		li.Differs = append(li.Differs, "type")
	}
	ports := make([]Port, 0, len(si.Spec.Ports))
	for _, p := range si.Spec.Ports {
		ports = append(ports, Port{Name: p.Name, Protocol: string(registry.ProtocolOrTCP(p.Protocol)), Port: p.Port, AppProtocol: deref(p.AppProtocol)})
	}
	if !sameSet(ports, svc.Import.Ports, comparePorts) {
		li.Differs = append(li.Differs, "ports")
	}
	if !sameSet(li.Clusters, svc.Import.Clusters, cmp.Compare[string]) {
		li.Differs = append(li.Differs, "clusters")
	}
	return li
}

func sortLocalImports(imports []LocalImport) {
	slices.SortFunc(imports, func(a, b LocalImport) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

// lastWrite is the latest time in m's managed fields, or its creation.
func lastWrite(m metav1.ObjectMeta) time.Time {
	t := m.CreationTimestamp.Time
	for _, f := range m.ManagedFields {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func condition(c metav1.Condition) Condition {
	out := Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message}
	if !c.LastTransitionTime.IsZero() {
		out.LastTransitionTime = c.LastTransitionTime.UTC()
	}
	return out
}

// sameSet reports whether a and b hold the same elements, in any order.
func sameSet[T any](a, b []T, compare func(x, y T) int) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, compare)
	slices.SortFunc(y, compare)
	return slices.EqualFunc(x, y, func(p, q T) bool { return compare(p, q) == 0 })
}

func comparePorts(a, b Port) int {
	return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port), cmp.Compare(a.AppProtocol, b.AppProtocol))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
