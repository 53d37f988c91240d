package cloudmap

import (
	"errors"
	"fmt"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func TestForbidden(t *testing.T) {
	denied := fmt.Errorf("list namespaces: %w", &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized"})
	if err := forbidden(errors.Join(errors.New("other"), denied)); !errors.Is(err, registry.ErrForbidden) {
		t.Errorf("access denied: %v, want ErrForbidden", err)
	}
	throttled := &smithy.GenericAPIError{Code: "ThrottlingException"}
	if err := forbidden(throttled); errors.Is(err, registry.ErrForbidden) || !errors.Is(err, throttled) {
		t.Errorf("throttled: %v, want it as it is", err)
	}
	if forbidden(nil) != nil {
		t.Error("nil is no error")
	}
}
