// Package poll waits in tests for an observable state: Until calls a
// condition until it holds or a timeout passes, and fails the test with the
// condition's last word; Throughout checks that a condition holds for a
// while (that something does not happen). It is the one polling helper of
// mcsd's tests; a test waits for a state, never for a stretch of time.
package poll
