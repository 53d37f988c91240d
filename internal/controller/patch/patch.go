package patch

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Status patches the status subresource of obj from base (obj as it was
// read) to obj when status, which returns an object's status, differs
// between them, and reports whether it wrote.
func Status[T client.Object](ctx context.Context, c client.Client, base, obj T, status func(T) any) (bool, error) {
	if equality.Semantic.DeepEqual(status(base), status(obj)) {
		return false, nil
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFrom(base)); err != nil {
		return false, fmt.Errorf("patch status: %w", err)
	}
	return true, nil
}
