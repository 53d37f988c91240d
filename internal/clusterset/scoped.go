package clusterset

import "github.com/mcsd-io/mcsd/pkg/registry"

// ScopedView is a View of the namespaces it is told it needs (Need): a
// cluster imports and exports the Services of the namespaces it has only.
// Watched by a backend that scopes (registry.Scoped), it holds the records
// of those namespaces alone, and HasSyncedFor says which it holds; over
// any other backend it holds everything, as a View does. A namespace is
// never dropped: one deleted and created again needs no second read.
type ScopedView struct {
	*View
	registry.Needed
}

var _ registry.Scoped = (*ScopedView)(nil)

// NewScopedView returns an empty ScopedView that needs no namespace yet.
func NewScopedView() *ScopedView {
	return &ScopedView{View: NewView()}
}
