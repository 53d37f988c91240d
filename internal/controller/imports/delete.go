package imports

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// reconcileDelete removes what mcsd created for a Service that no cluster
// exports any more: its EndpointSlices, its derived Service and its
// ServiceImport (si, nil when there is none of mcsd's). Objects without
// mcsd's marker are left alone. Owner references would have the garbage
// collector delete the slices and Service with the ServiceImport; deleting
// them here makes the removal immediate and independent of the collector.
func (r *Reconciler) reconcileDelete(ctx context.Context, key registry.ServiceKey, si *mcsv1beta1.ServiceImport) error {
	log := ctrl.LoggerFrom(ctx)
	if err := r.deleteEndpointSlices(ctx, key); err != nil {
		return err
	}
	svc := &corev1.Service{}
	name := derivedServiceOf(si, key)
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, svc); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("get derived Service: %w", err)
	case isOurService(svc, key.Name):
		log.Info("Deleting derived Service: the Service is no longer exported", "service", klog.KObj(svc))
		if err := r.Client.Delete(ctx, svc); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete derived Service: %w", err)
		}
	}
	if si != nil {
		log.Info("Deleting ServiceImport: the Service is no longer exported")
		if err := r.Client.Delete(ctx, si); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete ServiceImport: %w", err)
		}
	}
	r.forget(types.NamespacedName{Namespace: key.Namespace, Name: key.Name})
	r.propagation.Forget(key)
	return nil
}

// deleteEndpointSlices deletes every EndpointSlice mcsd wrote for key.
func (r *Reconciler) deleteEndpointSlices(ctx context.Context, key registry.ServiceKey) error {
	n, err := r.deleteSlicesBy(ctx, key, wellknown.ManagedBy)
	if n > 0 {
		ctrl.LoggerFrom(ctx).Info("Deleted EndpointSlices", "count", n)
	}
	return err
}

// deleteSlicesBy deletes the EndpointSlices of the import key that
// managedBy wrote, and returns how many it deleted.
func (r *Reconciler) deleteSlicesBy(ctx context.Context, key registry.ServiceKey, managedBy string) (int, error) {
	slices, err := r.listSlicesBy(ctx, key, managedBy)
	if err != nil {
		return 0, err
	}
	for i := range slices {
		if err := r.Client.Delete(ctx, &slices[i]); client.IgnoreNotFound(err) != nil {
			return i, fmt.Errorf("delete EndpointSlice %s: %w", slices[i].Name, err)
		}
	}
	return len(slices), nil
}
