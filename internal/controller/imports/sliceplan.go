package imports

import (
	"encoding/binary"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// slicePlan is what an import's EndpointSlices need: the writes that make
// them clusterSlices' for every source cluster.
type slicePlan struct {
	create []*discoveryv1.EndpointSlice
	// grow and update are existing slices with what mcsd wants applied:
	// grow those that gain an endpoint (one that another slice may
	// lose), update the others.
	grow, update []*discoveryv1.EndpointSlice
	// replace are slices whose address type (immutable) changed: have is
	// deleted, want created.
	replace []sliceReplacement
	remove  []*discoveryv1.EndpointSlice
	// built are the source clusters whose slices were built and compared;
	// the others' were left as they are, their inputs unchanged.
	built []string
}

type sliceReplacement struct{ have, want *discoveryv1.EndpointSlice }

// planSlices compares the import's existing EndpointSlices with those it
// should have. A source cluster whose slices all carry the digest of their
// present inputs (AnnotationSliceInputs, sliceInputsHold) is left as it is,
// without building its slices: a reconcile after one cluster's change costs
// that cluster's slices, and a digest for each of the others.
func planSlices(s *scope, existing []discoveryv1.EndpointSlice) slicePlan {
	var plan slicePlan
	byName := make(map[string]*discoveryv1.EndpointSlice, len(existing))
	byCluster := map[string][]*discoveryv1.EndpointSlice{}
	for i := range existing {
		sl := &existing[i]
		byName[sl.Name] = sl
		c := sl.Labels[mcsv1beta1.LabelSourceCluster]
		byCluster[c] = append(byCluster[c], sl)
	}
	// The retiring Services' slices copy every cluster's: they are built
	// whole while there are any.
	retiring := len(s.retiring.services) > 0
	var desired []*discoveryv1.EndpointSlice
	for _, cluster := range s.res.Clusters {
		digest := sliceInputs(s, cluster)
		if !retiring && sliceInputsHold(s, cluster, digest, byCluster[cluster]) {
			for _, sl := range byCluster[cluster] {
				delete(byName, sl.Name)
			}
			continue
		}
		plan.built = append(plan.built, cluster)
		want := clusterSlices(s, cluster, s.endpoints[cluster], byCluster[cluster])
		value := digest + "." + strconv.Itoa(len(want))
		for _, sl := range want {
			sl.Annotations[wellknown.AnnotationSliceInputs] = value
		}
		desired = append(desired, want...)
	}
	desired = append(desired, retiringSlices(s, desired)...)
	for _, want := range desired {
		have, ok := byName[want.Name]
		delete(byName, want.Name)
		switch {
		case ok && have.AddressType != want.AddressType:
			plan.replace = append(plan.replace, sliceReplacement{have: have, want: want})
		case !ok:
			plan.create = append(plan.create, want)
		case !sliceUpToDate(have, want, s.sliceOwners, s.nodeHintsDropped):
			gains := gainsEndpoint(have, want)
			applySlice(have, want)
			if gains {
				plan.grow = append(plan.grow, have)
			} else {
				plan.update = append(plan.update, have)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		plan.remove = append(plan.remove, byName[name])
	}
	return plan
}

// gainsEndpoint reports whether want lists an endpoint that have does not.
func gainsEndpoint(have, want *discoveryv1.EndpointSlice) bool {
	keys := make(map[string]bool, len(have.Endpoints))
	for _, e := range have.Endpoints {
		keys[endpointKey(e)] = true
	}
	return slices.ContainsFunc(want.Endpoints, func(e discoveryv1.Endpoint) bool { return !keys[endpointKey(e)] })
}

// sliceInputsHold reports whether cluster's existing slices are those its
// inputs (digest) make, without building them: every one carries the
// digest and their number, mcsd's labels and a controller reference it
// accepts, and none was written by anyone else (mcsd's field manager
// alone), so that a slice edited, replaced or deleted by hand is still
// mended.
func sliceInputsHold(s *scope, cluster, digest string, have []*discoveryv1.EndpointSlice) bool {
	if len(have) == 0 {
		return false
	}
	value := digest + "." + strconv.Itoa(len(have))
	labels := sliceLabels(s, cluster)
	// Slices written while the API server dropped node hints carry the
	// digest of hints they lack: once it keeps them (as far as this
	// controller knows), they are built and compared again.
	nodes := s.hints.Nodes() && !s.nodeHintsDropped
	for _, sl := range have {
		if sl.Annotations[wellknown.AnnotationSliceInputs] != value || !writtenByMcsdAlone(sl) ||
			!sliceLabelsAndOwnerHold(sl, labels, s.sliceOwners) ||
			(nodes && len(sl.Endpoints) > 0 && !slices.ContainsFunc(sl.Endpoints, hasNodeHints)) {
			return false
		}
	}
	return true
}

// writtenByMcsdAlone reports whether sl's one field manager is mcsd's, by
// updates (a create counts as one): someone else's create of a copy, or
// edit, adds or replaces it.
func writtenByMcsdAlone(sl *discoveryv1.EndpointSlice) bool {
	return len(sl.ManagedFields) == 1 && sl.ManagedFields[0].Manager == wellknown.FieldManager &&
		sl.ManagedFields[0].Operation == metav1.ManagedFieldsOperationUpdate
}

// sliceInputsVersion changes when clusterSlices makes other slices of the
// same inputs, so that every digest does.
const sliceInputsVersion = "2"

// sliceInputs is the digest of everything clusterSlices makes cluster's
// slices from: the Service's name, the cluster and whether it is this
// one, the import's type, ports and families, the ports the cluster
// serves, its endpoints and its hints.
func sliceInputs(s *scope, cluster string) string {
	var d digest
	d.str(sliceInputsVersion, s.key.Name, cluster, string(s.res.Spec.Type), s.hints.KeyFor(cluster))
	d.flag(cluster == s.localCluster)
	d.num(len(s.res.Spec.Ports))
	for _, p := range s.res.Spec.Ports {
		d.port(p.Name, string(p.Protocol), p.AppProtocol, p.Port)
	}
	d.num(len(s.res.Spec.IPFamilies))
	for _, f := range s.res.Spec.IPFamilies {
		d.str(string(f))
	}
	served := s.res.Served[cluster]
	d.num(len(served))
	d.str(served...)
	groups := s.endpoints[cluster].Groups
	d.num(len(groups))
	for _, g := range groups {
		d.group(g)
	}
	return d.sum()
}

// digest is an unambiguous encoding of values (each string after its
// length), to be hashed.
type digest []byte

func (d *digest) str(v ...string) {
	for _, x := range v {
		*d = binary.AppendUvarint(*d, uint64(len(x)))
		*d = append(*d, x...)
	}
}

func (d *digest) num(n int) { *d = binary.AppendVarint(*d, int64(n)) }

func (d *digest) flag(b bool) {
	if b {
		*d = append(*d, 1)
	} else {
		*d = append(*d, 0)
	}
}

func (d *digest) optional(s *string) {
	d.flag(s != nil)
	if s != nil {
		d.str(*s)
	}
}

// port adds a port's fields.
func (d *digest) port(name, protocol string, appProtocol *string, number int32) {
	d.str(name, protocol)
	d.optional(appProtocol)
	d.num(int(number))
}

// group adds every field of g.
func (d *digest) group(g registry.EndpointGroup) {
	d.str(string(g.AddressType))
	d.num(len(g.Ports))
	for _, p := range g.Ports {
		d.port(p.Name, string(p.Protocol), p.AppProtocol, p.Port)
	}
	d.num(len(g.Endpoints))
	for _, e := range g.Endpoints {
		d.num(len(e.Addresses))
		d.str(e.Addresses...)
		d.flag(e.Ready)
		d.flag(e.Serving)
		d.flag(e.Terminating)
		d.str(e.Hostname, e.NodeName, e.Zone)
	}
}

// sum is the FNV-1a hash of d, in base 36.
func (d digest) sum() string {
	h := fnv.New64a()
	_, _ = h.Write(d)
	return strconv.FormatUint(h.Sum64(), 36)
}
