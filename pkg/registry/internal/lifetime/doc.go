// Package lifetime binds a call that runs for a while, such as a registry
// watch, to the life of the backend that serves it: the call ends when its
// own context ends or when the backend is closed, whichever comes first.
// Sleep is the backends' wait between two attempts that a context cuts
// short.
package lifetime
