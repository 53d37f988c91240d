package manager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// A negative bound on the caches' first sync is refused before anything
// starts.
func TestRunRefusesANegativeCacheSyncTimeout(t *testing.T) {
	err := Run(t.Context(), Options{
		RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"},
		OpenRegistry: func(context.Context, registry.Identity) (registry.Registry, error) {
			return nil, errors.New("not opened")
		},
		CacheSyncTimeout: -time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "CacheSyncTimeout -1s is negative") {
		t.Errorf("Run with a negative CacheSyncTimeout: %v, want it refused", err)
	}
}
