// Package connstate is a registry watch's connection state as its handler
// knows it: a backend's watch reports every read that succeeds or fails, and
// the handler hears of a change only.
package connstate
