package export

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/wellknown"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// reconcileDelete withdraws the export of a ServiceExport being deleted
// and removes mcsd's finalizer (and the AWS controller's) from it.
func (r *Reconciler) reconcileDelete(ctx context.Context, se *mcsv1beta1.ServiceExport, key registry.ServiceKey) error {
	if !controllerutil.ContainsFinalizer(se, Finalizer) {
		// Deleted (another party's finalizer keeps it) before mcsd's
		// finalizer was added, perhaps after it was published.
		if err := r.withdrawGone(ctx, key); err != nil {
			return err
		}
		return r.releaseAWSFinalizer(ctx, se)
	}
	if err := r.Registry.DeleteExport(ctx, key); err != nil {
		// Said on the object (finalize writes the status): the deletion
		// waits for the registry.
		return r.registryFailed(se, fmt.Errorf("withdraw export: %w", err))
	}
	r.forgetLocal(key)
	ctrl.LoggerFrom(ctx).Info("Withdrew export of deleted ServiceExport")
	base := se.DeepCopy()
	controllerutil.RemoveFinalizer(se, Finalizer)
	controllerutil.RemoveFinalizer(se, wellknown.AWSExportFinalizer)
	if err := r.Client.Patch(ctx, se, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	r.forget(client.ObjectKeyFromObject(se))
	return nil
}

// addFinalizer adds mcsd's finalizer to se, which it modifies.
func (r *Reconciler) addFinalizer(ctx context.Context, se *mcsv1beta1.ServiceExport) error {
	base := se.DeepCopy()
	controllerutil.AddFinalizer(se, Finalizer)
	// The AWS Cloud Map MCS controller's, left by a cluster that ran it: mcsd
	// withdraws what that controller wrote for this cluster with its own
	// records (the backend took them over), and its finalizer would keep
	// the ServiceExport for ever once it is deleted.
	controllerutil.RemoveFinalizer(se, wellknown.AWSExportFinalizer)
	if err := r.Client.Patch(ctx, se, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	return nil
}

// releaseAWSFinalizer removes the AWS Cloud Map MCS controller's finalizer
// from a deleted ServiceExport whose records mcsd withdrew: that controller
// no longer runs here to remove it.
func (r *Reconciler) releaseAWSFinalizer(ctx context.Context, se *mcsv1beta1.ServiceExport) error {
	if !controllerutil.ContainsFinalizer(se, wellknown.AWSExportFinalizer) {
		return nil
	}
	base := se.DeepCopy()
	controllerutil.RemoveFinalizer(se, wellknown.AWSExportFinalizer)
	if err := r.Client.Patch(ctx, se, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove the AWS controller's finalizer: %w", err))
	}
	return nil
}
