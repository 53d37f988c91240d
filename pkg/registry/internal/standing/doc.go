// Package standing keeps whether a backend's own records may have lapsed in
// the registry, and signals each change of it, for registry.Lapser.
package standing
