// Package conditions sets and reads the metav1.Condition lists that mcsd
// writes on ServiceExports and ServiceImports, and names what mcsd adds to
// the mcs-api conditions: the RegistryReachable condition, its own reasons,
// and the order of the conflict reasons. Set changes a condition only when
// its content changes, keeps LastTransitionTime unless the status flips, and
// keeps the list in a stable order, so that reconciling an unchanged object
// produces an identical status and no write.
package conditions
