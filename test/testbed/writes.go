package testbed

import (
	"maps"
	"net/http"
	"strings"
	"sync"
)

// WriteCounter counts the API writes made through a rest.Config it wraps
// (cfg.Wrap(w.Wrap)), by resource, so tests and benchmarks can show that
// unchanged objects are never written.
type WriteCounter struct {
	mu         sync.Mutex
	byResource map[string]int
}

// NewWriteCounter returns a counter at zero.
func NewWriteCounter() *WriteCounter { return &WriteCounter{byResource: map[string]int{}} }

// Failed is the suffix of the counts of write attempts that wrote nothing.
const Failed = " (failed)"

// Wrap counts every POST, PUT, PATCH and DELETE that rt sends: under its
// resource when the API server carried it out (a 2xx answer), under the
// resource and Failed when it was refused, failed or never answered (an API
// server down or starting), which wrote nothing but is an attempt all the
// same.
func (w *WriteCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		switch req.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			key := ResourceOf(req.URL.Path)
			if err != nil || resp.StatusCode/100 != 2 {
				key += Failed
			}
			w.mu.Lock()
			w.byResource[key]++
			w.mu.Unlock()
		}
		return resp, err
	})
}

// Snapshot returns the writes so far, by resource ("serviceimports",
// "serviceimports/status", ...), and the failed attempts (resource and
// Failed).
func (w *WriteCounter) Snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.byResource)
}

// ResourceOf extracts the resource (and subresource) from an API path:
// /apis/g/v/namespaces/ns/serviceimports/name/status -> serviceimports/status.
func ResourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "namespaces"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}

// DiffWrites returns after-before per resource, leaving out zeros: the
// writes between two snapshots.
func DiffWrites(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
