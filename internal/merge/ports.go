package merge

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// maxPortNotes caps how many port conflicts the message spells out.
const maxPortNotes = 4

// port is a registry.Port with defaults applied: protocol TCP when unset,
// and "" for no appProtocol.
type port struct {
	name        string
	protocol    corev1.Protocol
	number      int32
	appProtocol string
}

func normalizePort(p registry.Port) port {
	np := port{name: p.Name, protocol: registry.ProtocolOrTCP(p.Protocol), number: p.Port}
	if p.AppProtocol != nil {
		np.appProtocol = *p.AppProtocol
	}
	return np
}

func (p port) String() string {
	s := "unnamed"
	if p.name != "" {
		s = quote(p.name)
	}
	s += fmt.Sprintf(" %s/%d", p.protocol, p.number)
	if p.appProtocol != "" {
		s += " appProtocol " + quote(p.appProtocol)
	}
	return s
}

// importPort is one port of the union, with the cluster it came from, the
// clusters whose matching port differs and the clusters with no matching
// port at all.
type importPort struct {
	port
	// appUnknown: the port came from an export that does not carry
	// appProtocol (registry.Export.Partial); the first export that carries it
	// gives it its appProtocol.
	appUnknown bool
	origin     string
	// appOrigin is the cluster whose appProtocol the port took, when
	// another than origin (origin's appProtocol was unknown) and not none.
	appOrigin string
	diffs     []dissent
	lacking   []string
}

// portUnion is the union of the ports of all exports.
type portUnion struct {
	// oldest is the cluster of the oldest export.
	oldest string
	ports  []importPort
	// dropped are ports that match no import port but cannot be added: an
	// unnamed port may only stand alone.
	dropped []dissent
}

// unionPorts merges the ports of ex, oldest export first. A port matches an
// import port by name, else by protocol and number. A matched port that
// differs in any way loses to the import port (PortConflict); an unmatched
// port is added, unless the union would then hold an unnamed port next to
// another one, in which case it is dropped (PortConflict). Either way no two
// import ports share a name or a protocol and number, and the order is the
// oldest export's, then additions in export order.
//
// Port sets that differ are a conflict too (PortConflict): every import port
// records the clusters with no port matching it.
func unionPorts(ex []registry.Export) portUnion {
	var u portUnion
	if len(ex) > 0 {
		u.oldest = ex[0].Cluster
	}
	for _, e := range ex {
		for _, rp := range e.Spec.Ports {
			p := normalizePort(rp)
			if i := u.match(p); i >= 0 {
				ip := &u.ports[i]
				switch {
				case e.Partial || ip.appUnknown:
					// One side's appProtocol is unknown: it is not
					// compared.
					if q := (port{ip.name, ip.protocol, ip.number, p.appProtocol}); q != p {
						ip.diffs = append(ip.diffs, dissent{e.Cluster, p.String()})
					} else if ip.appUnknown && !e.Partial {
						ip.appProtocol, ip.appUnknown = p.appProtocol, false
						if p.appProtocol != "" {
							ip.appOrigin = e.Cluster
						}
					}
				case ip.port != p:
					ip.diffs = append(ip.diffs, dissent{e.Cluster, p.String()})
				}
				continue
			}
			if len(u.ports) > 0 && (p.name == "" || u.ports[0].name == "") {
				u.dropped = append(u.dropped, dissent{e.Cluster, p.String()})
				continue
			}
			u.ports = append(u.ports, importPort{port: p, origin: e.Cluster, appUnknown: e.Partial})
		}
	}
	for _, e := range ex {
		matched := make([]bool, len(u.ports))
		for _, rp := range e.Spec.Ports {
			if i := u.match(normalizePort(rp)); i >= 0 {
				matched[i] = true
			}
		}
		for i, m := range matched {
			if !m {
				u.ports[i].lacking = append(u.ports[i].lacking, e.Cluster)
			}
		}
	}
	return u
}

// match returns the index of the import port p matches, or -1.
func (u portUnion) match(p port) int {
	for i, ip := range u.ports {
		if ip.name == p.name {
			return i
		}
	}
	for i, ip := range u.ports {
		if ip.protocol == p.protocol && ip.number == p.number {
			return i
		}
	}
	return -1
}

// servicePorts returns the import ports; an empty, non-nil list when there
// are none (ports is a required field of the ServiceImport spec).
func (u portUnion) servicePorts() []mcsv1beta1.ServicePort {
	out := make([]mcsv1beta1.ServicePort, 0, len(u.ports))
	for _, p := range u.ports {
		sp := mcsv1beta1.ServicePort{Name: p.name, Protocol: p.protocol, Port: p.number}
		if p.appProtocol != "" {
			ap := p.appProtocol
			sp.AppProtocol = &ap
		}
		out = append(out, sp)
	}
	return out
}

// served returns the names of the import ports e's endpoints may serve: e's
// Service defines the port as the import does (same name, protocol and
// number). Its EndpointSlices then carry that port under that name. A
// cluster whose port of that name lost a conflict (another number or
// protocol) does not serve it: a client connecting to the import's port
// would otherwise reach pods that were never exposed on it.
func (u portUnion) served(e registry.Export) []string {
	var names []string
	for _, ip := range u.ports {
		for _, rp := range e.Spec.Ports {
			p := normalizePort(rp)
			if p.name == ip.name && p.protocol == ip.protocol && p.number == ip.number {
				names = append(names, ip.name)
				break
			}
		}
	}
	return names
}

// notes describes the port conflicts, at most maxPortNotes of them.
func (u portUnion) notes() []string {
	var notes []string
	for _, ip := range u.ports {
		if len(ip.diffs) > 0 {
			why := "oldest export with this port"
			if ip.appOrigin != "" {
				why += "; its appProtocol from cluster " + quote(ip.appOrigin)
			}
			notes = append(notes, conflictNote("ports", ip.String(), ip.origin, why, ip.diffs))
		}
		if len(ip.lacking) > 0 {
			notes = append(notes, u.setNote(ip))
		}
	}
	if len(u.dropped) > 0 {
		notes = append(notes, "ports: an unnamed port must be the only port, dropped "+listDissent(u.dropped, "of"))
	}
	if len(notes) > maxPortNotes {
		more := len(notes) - maxPortNotes
		notes = append(notes[:maxPortNotes], fmt.Sprintf("ports: %d more conflicts", more))
	}
	return notes
}

// winner is the cluster whose ports won every port conflict on a value,
// when one did; "" when none was on a value (a port some cluster lacks, an
// unnamed port dropped), or ports of several clusters won (a port in
// conflict whose appProtocol came from another cluster than the rest of
// it counts as two).
func (u portUnion) winner() string {
	w := ""
	for _, ip := range u.ports {
		if len(ip.diffs) == 0 {
			continue
		}
		if ip.appOrigin != "" || (w != "" && w != ip.origin) {
			return ""
		}
		w = ip.origin
	}
	return w
}

// setNote describes a port not every cluster exports, seen from the oldest
// export: other clusters lack a port it has, or a newer cluster adds one it
// lacks.
//
//	ports: cluster "c2" lacks "metrics" TCP/9090 of cluster "c1"
//	ports: cluster "c2" adds "sig" SCTP/3868, which cluster "c1" lacks
func (u portUnion) setNote(ip importPort) string {
	verb := "lacks"
	if len(ip.lacking) > 1 {
		verb = "lack"
	}
	if ip.origin == u.oldest {
		return fmt.Sprintf("ports: %s %s %s of cluster %s", listClusters(ip.lacking), verb, ip.String(), quote(ip.origin))
	}
	return fmt.Sprintf("ports: cluster %s adds %s, which %s %s", quote(ip.origin), ip.String(), listClusters(ip.lacking), verb)
}
