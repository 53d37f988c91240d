package install

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	fw "github.com/mcsd-io/mcsd/test/framework"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// serviceAccountConfig mints a token for ServiceAccount ns/name of cluster c
// (TokenRequest API) and returns a config that authenticates with it alone,
// trusting the cluster's CA.
func serviceAccountConfig(t testing.TB, c *testbed.Cluster, ns, name string) *rest.Config {
	t.Helper()
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = fw.ServiceAccountToken(t, c, ns, name)
	cfg.QPS, cfg.Burst = 200, 400
	return cfg
}

// controller is one cluster's mcsd, run in the test process by
// manager.Run as the command runs it, with leader election on.
type controller struct {
	id        string
	cancel    context.CancelFunc
	done      chan struct{}
	healthURL string
	requests  *requestLog
}

// startController runs mcsd for cluster id with cfg; requests records every
// API request it makes.
func startController(t testing.TB, id string, cfg *rest.Config) *controller {
	t.Helper()
	return startControllerWith(t, id, cfg, env.OpenRegistry)
}

// startControllerWith is startController with a registry of its own.
func startControllerWith(t testing.TB, id string, cfg *rest.Config, open func(context.Context, registry.Identity) (registry.Registry, error)) *controller {
	t.Helper()
	port, err := testbed.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := &controller{id: id, done: make(chan struct{}), healthURL: fmt.Sprintf("http://127.0.0.1:%d", port), requests: &requestLog{}}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(c.requests.wrap)
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	log := zap.New(zap.UseDevMode(true), zap.WriteTo(logWriter(id))).WithValues("testCluster", id)
	ctx = logr.NewContext(ctx, log)
	go func() {
		defer close(c.done)
		err := manager.Run(ctx, manager.Options{
			RESTConfig:              cfg,
			OpenRegistry:            open,
			MetricsAddr:             "0",
			HealthAddr:              fmt.Sprintf("127.0.0.1:%d", port),
			LeaderElection:          true,
			LeaderElectionNamespace: "mcsd-system",
			IdentityRetry:           500 * time.Millisecond,
		})
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "mcsd in %s stopped: %v\n", id, err)
		}
	}()
	return c
}

// stop stops the controller; it releases its leader lease.
func (c *controller) stop() {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
	}
}

// waitReady waits until /readyz answers OK: mcsd has its identity, leads,
// has read the registry and synced its caches.
func (c *controller) waitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "mcsd in "+c.id+" ready", func() (bool, string) {
		resp, err := http.Get(c.healthURL + "/readyz?verbose")
		if err != nil {
			return false, fmt.Sprintf("%v; forbidden requests: %v", err, c.requests.forbidden())
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s: %s; forbidden requests: %v", resp.Status, strings.TrimSpace(string(body)), c.requests.forbidden())
	})
}

// apiRequest is one API request as RBAC sees it.
type apiRequest struct {
	Verb, Group, Resource, Subresource, Namespace, Name string
	// Code is the response's status code, 0 when there was none.
	Code int
}

func (r apiRequest) String() string {
	res := r.Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	return fmt.Sprintf("%s %s %s %s/%s -> %d", r.Verb, r.Group, res, r.Namespace, r.Name, r.Code)
}

// requestLog records the resource requests of a client.
type requestLog struct {
	mu   sync.Mutex
	reqs []apiRequest
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		r, ok := parseRequest(req)
		resp, err := rt.RoundTrip(req)
		if ok {
			if resp != nil {
				r.Code = resp.StatusCode
			}
			l.mu.Lock()
			l.reqs = append(l.reqs, r)
			l.mu.Unlock()
		}
		return resp, err
	})
}

func (l *requestLog) snapshot() []apiRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

// forbidden returns the requests the API server refused with 403.
func (l *requestLog) forbidden() []apiRequest {
	return slices.DeleteFunc(l.snapshot(), func(r apiRequest) bool { return r.Code != http.StatusForbidden })
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// parseRequest tells what RBAC checks for a request: /api/v1/... or
// /apis/GROUP/VERSION/..., then [namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE]].
// Discovery and other non-resource requests are not recorded.
func parseRequest(req *http.Request) (apiRequest, bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var r apiRequest
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		r.Group, parts = parts[1], parts[3:]
	default:
		return r, false
	}
	if parts[0] == "namespaces" && len(parts) > 2 {
		r.Namespace, parts = parts[1], parts[2:]
	}
	r.Resource = parts[0]
	if len(parts) > 1 {
		r.Name = parts[1]
	}
	if len(parts) > 2 {
		r.Subresource = parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch w := req.URL.Query().Get("watch"); {
		case w == "true" || w == "1":
			r.Verb = "watch"
		case r.Name == "":
			r.Verb = "list"
		default:
			r.Verb = "get"
		}
	case http.MethodPost:
		r.Verb = "create"
	case http.MethodPut:
		r.Verb = "update"
	case http.MethodPatch:
		r.Verb = "patch"
	case http.MethodDelete:
		r.Verb = "delete"
		if r.Name == "" {
			r.Verb = "deletecollection"
		}
	default:
		r.Verb = strings.ToLower(req.Method)
	}
	return r, true
}

// policy is what the shipped RBAC grants mcsd's ServiceAccount: the
// ClusterRole everywhere, the Role in mcsd's namespace.
type policy struct {
	cluster    []rbacv1.PolicyRule
	namespace  string
	namespaced []rbacv1.PolicyRule
}

// rule returns the rule that allows r, or nil.
func (p policy) rule(r apiRequest) *rbacv1.PolicyRule {
	rules := p.cluster
	if r.Namespace == p.namespace {
		rules = append(slices.Clone(rules), p.namespaced...)
	}
	res := r.Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for i := range rules {
		rule := &rules[i]
		if has(rule.APIGroups, r.Group) && has(rule.Resources, res) && has(rule.Verbs, r.Verb) &&
			(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, r.Name)) {
			return rule
		}
	}
	return nil
}

// grants lists every group, resource and verb the policy grants, as
// "group resource verb".
func (p policy) grants() []string {
	var out []string
	for _, rule := range slices.Concat(p.cluster, p.namespaced) {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					out = append(out, grant(g, res, v))
				}
			}
		}
	}
	return out
}

func grant(group, resource, verb string) string {
	if group == "" {
		group = "core"
	}
	return group + " " + resource + " " + verb
}

// logWriter sends a controller's logs to a file when MCSD_E2E_LOG_DIR is
// set, and nowhere otherwise.
func logWriter(id string) io.Writer {
	dir := os.Getenv("MCSD_E2E_LOG_DIR")
	if dir == "" {
		return io.Discard
	}
	_ = os.MkdirAll(dir, 0o755)
	f, err := os.OpenFile(filepath.Join(dir, "install-"+id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return io.Discard
	}
	return f
}
