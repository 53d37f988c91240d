// Package writelock is the lock that serializes a registry backend's writes:
// taking it waits for the caller's context and fails once the backend is
// closed, so no write starts after Close.
package writelock
