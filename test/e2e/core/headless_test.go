package core

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	fw "github.com/mcsd-io/mcsd/test/framework"
)

// hostnames returns address → hostname of the endpoints of slices.
func hostnames(ss []discoveryv1.EndpointSlice) map[string]string {
	out := map[string]string{}
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				out[a] = ptr.Deref(ep.Hostname, "")
			}
		}
	}
	return out
}

// A headless StatefulSet exported from two clusters imports as Headless:
// no IPs, no derived Service, and per source cluster the slices keep the
// pods' hostnames and name no Service for kube-proxy.
func TestHeadlessStatefulSet(t *testing.T) {
	ns, _ := setUpTest(t, "headless-sts")
	want := map[string]map[string]string{} // source cluster → address → hostname
	for _, id := range []string{"c1", "c2"} {
		cl := env.Client(t, id)
		fw.Deploy(t, cl, fw.App{Namespace: ns, Name: "web", Replicas: 2, Headless: true, StatefulSet: true})
		waitPods(t, cl, ns, "web", 2)
		// Kubernetes' own slices carry the hostnames: the precondition of
		// everything below.
		poll.Until(t, timeout, "local slices with hostnames in "+id, func() (bool, string) {
			var list discoveryv1.EndpointSliceList
			if err := cl.List(context.Background(), &list, client.InNamespace(ns),
				client.MatchingLabels{discoveryv1.LabelServiceName: "web"}); err != nil {
				return false, err.Error()
			}
			h := hostnames(list.Items)
			got := slices.Sorted(maps.Values(h))
			if !slices.Equal(got, []string{"web-0", "web-1"}) {
				return false, fmt.Sprintf("local endpoints %v", h)
			}
			want[id] = h
			return true, ""
		})
	}
	for _, id := range []string{"c1", "c2"} {
		fw.Export(t, env.Client(t, id), ns, "web")
	}

	inEveryCluster(t, "headless import", func(id string, cl client.Client) (bool, string) {
		si := fw.GetImport(t, cl, ns, "web")
		if si == nil {
			return false, "no ServiceImport"
		}
		if si.Spec.Type != mcsv1beta1.Headless || len(si.Spec.IPs) != 0 {
			return false, fmt.Sprintf("type %s, IPs %v", si.Spec.Type, si.Spec.IPs)
		}
		if got := importClusters(si); !slices.Equal(got, []string{"c1", "c2"}) {
			return false, fmt.Sprintf("status.clusters %v", got)
		}
		if ok, msg := importReady(si); !ok {
			return false, msg
		}
		if svc := derivedService(t, cl, ns, "web"); svc != nil {
			return false, "derived Service exists: " + svc.Name
		}
		bySource := importedSlices(t, cl, ns, "web")
		for _, src := range []string{"c1", "c2"} {
			ss := bySource[src]
			if got := hostnames(ss); !maps.Equal(got, want[src]) {
				return false, fmt.Sprintf("endpoints from %s %v, want %v", src, got, want[src])
			}
			for _, s := range ss {
				if v, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
					return false, fmt.Sprintf("slice %s from %s has %s=%q", s.Name, src, discoveryv1.LabelServiceName, v)
				}
			}
		}
		return true, ""
	})
}
