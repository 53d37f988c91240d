package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "github.com/mcsd-io/mcsd/api/about/v1alpha1"
	aboutv1beta1 "github.com/mcsd-io/mcsd/api/about/v1beta1"
	"github.com/mcsd-io/mcsd/config/crd"
)

// Scheme knows every API the testbed and mcsd use.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(mcsv1alpha1.Install(Scheme))
	utilruntime.Must(mcsv1beta1.Install(Scheme))
	utilruntime.Must(aboutv1alpha1.AddToScheme(Scheme))
	utilruntime.Must(aboutv1beta1.AddToScheme(Scheme))
}

// prepare installs the CRDs, the ClusterProperties and the kwok nodes. It is
// safe to run again on a prepared cluster.
func (c *Cluster) prepare(ctx context.Context) error {
	cl, err := c.Client()
	if err != nil {
		return err
	}
	if err := InstallCRDs(ctx, cl); err != nil {
		return err
	}
	// Established comes before the API server's discovery lists the new
	// group versions; a client that maps a kind in between fails.
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("discovery client for %s: %w", c.ID, err)
	}
	if err := waitDiscovered(ctx, dc); err != nil {
		return err
	}
	// A new client discovers the CRDs just installed.
	if cl, err = c.Client(); err != nil {
		return err
	}
	if err := ensureProperty(ctx, cl, aboutv1beta1.ClusterIDName, c.ID); err != nil {
		return err
	}
	if err := ensureProperty(ctx, cl, aboutv1beta1.ClusterSetIDName, c.tb.opts.ClusterSetID); err != nil {
		return err
	}
	for n := 0; n < c.tb.opts.NodesPerCluster; n++ {
		if err := c.ensureNode(ctx, cl, n); err != nil {
			return err
		}
	}
	return waitFor(ctx, time.Minute, "nodes of "+c.ID+" to be ready", func(ctx context.Context) (bool, error) {
		var nodes corev1.NodeList
		if err := cl.List(ctx, &nodes); err != nil {
			return false, err
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= c.tb.opts.NodesPerCluster, nil
	})
}

// InstallCRDs creates or updates mcsd's CRDs and waits until they are served.
func InstallCRDs(ctx context.Context, cl client.Client) error {
	crds, err := crd.All()
	if err != nil {
		return err
	}
	for _, want := range crds {
		got := &apiextensionsv1.CustomResourceDefinition{}
		err := cl.Get(ctx, client.ObjectKeyFromObject(want), got)
		switch {
		case apierrors.IsNotFound(err):
			if err := cl.Create(ctx, want); err != nil {
				return fmt.Errorf("create CRD %s: %w", want.Name, err)
			}
		case err != nil:
			return fmt.Errorf("get CRD %s: %w", want.Name, err)
		default:
			got.Spec = want.Spec
			got.Labels = want.Labels
			got.Annotations = want.Annotations
			if err := cl.Update(ctx, got); err != nil {
				return fmt.Errorf("update CRD %s: %w", want.Name, err)
			}
		}
	}
	for _, want := range crds {
		name := want.Name
		err := waitFor(ctx, defaultWait, "CRD "+name+" to be established", func(ctx context.Context) (bool, error) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := cl.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
				return false, err
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// waitDiscovered waits until discovery lists every served version of each of
// mcsd's CRDs with its resource.
func waitDiscovered(ctx context.Context, dc discovery.DiscoveryInterface) error {
	crds, err := crd.All()
	if err != nil {
		return err
	}
	return waitFor(ctx, defaultWait, "mcsd's APIs to be discovered", func(context.Context) (bool, error) {
		missing, err := undiscovered(dc, crds)
		if err != nil {
			return false, err
		}
		if len(missing) > 0 {
			return false, fmt.Errorf("not yet discovered: %s", strings.Join(missing, ", "))
		}
		return true, nil
	})
}

// undiscovered returns the served group versions and resources of crds that
// discovery does not list yet, as "group/version/resource".
func undiscovered(dc discovery.DiscoveryInterface, crds []*apiextensionsv1.CustomResourceDefinition) ([]string, error) {
	groups, err := dc.ServerGroups()
	if err != nil {
		return nil, fmt.Errorf("list API groups: %w", err)
	}
	listed := map[string]bool{}
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			listed[v.GroupVersion] = true
		}
	}
	var missing []string
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := c.Spec.Group + "/" + v.Name
			name := gv + "/" + c.Spec.Names.Plural
			if !listed[gv] {
				missing = append(missing, name)
				continue
			}
			resources, err := dc.ServerResourcesForGroupVersion(gv)
			if apierrors.IsNotFound(err) {
				missing = append(missing, name)
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list resources of %s: %w", gv, err)
			}
			if !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == c.Spec.Names.Plural }) {
				missing = append(missing, name)
			}
		}
	}
	return missing, nil
}

func ensureProperty(ctx context.Context, cl client.Client, name, value string) error {
	p := &aboutv1beta1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: aboutv1beta1.ClusterPropertySpec{Value: value}}
	err := cl.Create(ctx, p)
	if apierrors.IsAlreadyExists(err) {
		got := &aboutv1beta1.ClusterProperty{}
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return fmt.Errorf("get ClusterProperty %s: %w", name, err)
		}
		if got.Spec.Value != value {
			return fmt.Errorf("ClusterProperty %s is %q, want %q: remove the testbed (make testbed-down) and start again", name, got.Spec.Value, value)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("create ClusterProperty %s: %w", name, err)
	}
	return nil
}

// NodeName returns the name of kwok node n (0-based) of the cluster.
func (c *Cluster) NodeName(n int) string { return fmt.Sprintf("%s-node-%d", c.ID, n) }

// Zone returns the zone label value of kwok node n of the cluster:
// zone-a, zone-b, zone-c with Options.SharedZones, else prefixed with the
// cluster's id.
func (c *Cluster) Zone(n int) string {
	z := fmt.Sprintf("zone-%c", 'a'+rune(n%3))
	if c.tb.opts.SharedZones {
		return z
	}
	return c.ID + "-" + z
}

func (c *Cluster) ensureNode(ctx context.Context, cl client.Client, n int) error {
	podCIDRs := NodePodCIDRs(c.Index, n)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.NodeName(n),
			Annotations: map[string]string{
				"kwok.x-k8s.io/node": "fake",
			},
			Labels: map[string]string{
				"kubernetes.io/hostname":      c.NodeName(n),
				"kubernetes.io/os":            "linux",
				"kubernetes.io/arch":          "amd64",
				"type":                        "kwok",
				"topology.kubernetes.io/zone": c.Zone(n),
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: podCIDRs[0], PodCIDRs: podCIDRs},
	}
	if err := cl.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", node.Name, err)
	}
	return nil
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}
