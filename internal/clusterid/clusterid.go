package clusterid

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1beta1 "github.com/mcsd-io/mcsd/api/about/v1beta1"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// ErrMissing is returned when a ClusterProperty mcsd needs does not exist.
var ErrMissing = errors.New("cluster identity missing")

// ErrInvalid is returned when a ClusterProperty holds an unusable value.
var ErrInvalid = errors.New("cluster identity invalid")

// Read returns the cluster's identity. Errors wrap ErrMissing or ErrInvalid
// with a message that tells the operator what to create.
func Read(ctx context.Context, c client.Reader) (registry.Identity, error) {
	cluster, err := readOne(ctx, c, aboutv1beta1.ClusterIDName)
	if err != nil {
		return registry.Identity{}, err
	}
	set, err := readOne(ctx, c, aboutv1beta1.ClusterSetIDName)
	if err != nil {
		return registry.Identity{}, err
	}
	return registry.Identity{Cluster: cluster, ClusterSet: set}, nil
}

func readOne(ctx context.Context, c client.Reader, name string) (string, error) {
	p := &aboutv1beta1.ClusterProperty{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, p)
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%w: ClusterProperty %q does not exist; create it, e.g. kubectl apply -f - <<<'{\"apiVersion\":\"about.k8s.io/v1beta1\",\"kind\":\"ClusterProperty\",\"metadata\":{\"name\":%q},\"spec\":{\"value\":\"<id>\"}}'",
			ErrMissing, name, name)
	}
	if err != nil {
		return "", fmt.Errorf("read ClusterProperty %q: %w", name, err)
	}
	validate := registry.ValidateClusterID
	if name == aboutv1beta1.ClusterSetIDName {
		validate = registry.ValidateClusterSetID
	}
	if err := validate(p.Spec.Value); err != nil {
		return "", fmt.Errorf("%w: ClusterProperty %q: %w", ErrInvalid, name, err)
	}
	return p.Spec.Value, nil
}

// InstanceNamespace is the namespace whose UID tells one Kubernetes cluster
// from another (registry.Identity.Instance): every cluster has it, and it
// keeps its UID for the cluster's life.
const InstanceNamespace = "kube-system"

// Instance returns the UID of the cluster's kube-system namespace.
func Instance(ctx context.Context, c client.Reader) (string, error) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: InstanceNamespace}, ns); err != nil {
		return "", fmt.Errorf("read namespace %s: %w", InstanceNamespace, err)
	}
	return string(ns.UID), nil
}
