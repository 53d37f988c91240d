package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcsd-io/mcsd/internal/manager"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
)

// unsyncedEnv makes this test binary, started by runUnsynced, run
// mcsd as unsyncedRun says instead of its tests.
const unsyncedEnv = "MCSD_E2E_UNSYNCED"

// unsyncedRun is mcsd's run in that child process: the API server, the
// ServiceAccount's token, and the bound on the caches' first sync.
type unsyncedRun struct {
	Host, ServerName, CAFile, Token string
	CAData                          []byte
	Insecure                        bool
	CacheSyncTimeout                time.Duration
	// Hold is a path whose GET requests (lists and watches of a resource
	// in every namespace) the run's client holds until they are given up,
	// as an API server that does not answer them would.
	Hold string
}

// holding holds path's GET requests until they are given up, and sends
// the others on.
type holding struct {
	next http.RoundTripper
	path string
}

func (h holding) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && req.URL.Path == h.path {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return h.next.RoundTrip(req)
}

// runUnsyncedChild runs mcsd as data (an unsyncedRun) says, over an
// in-memory registry, and returns the process's exit code: 1 when Run
// failed (its error printed), 2 when it did not within a minute. The run
// is a process of its own: controller-runtime's manager, stopped before
// its caches synced, never returns (internal/manager's runManager), and
// its spinning goroutine ends with the process.
func runUnsyncedChild(data string) int {
	var run unsyncedRun
	if err := json.Unmarshal([]byte(data), &run); err != nil {
		fmt.Println("decode the run:", err)
		return 2
	}
	cfg := &rest.Config{Host: run.Host, BearerToken: run.Token, TLSClientConfig: rest.TLSClientConfig{
		ServerName: run.ServerName, CAFile: run.CAFile, CAData: run.CAData, Insecure: run.Insecure,
	}}
	if run.Hold != "" {
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return holding{next: rt, path: run.Hold} })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = logr.NewContext(ctx, zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	store := memory.NewStore()
	err := manager.Run(ctx, manager.Options{
		RESTConfig: cfg,
		OpenRegistry: func(_ context.Context, id registry.Identity) (registry.Registry, error) {
			return store.Open(memory.Options{Identity: id})
		},
		MetricsAddr:      "0",
		HealthAddr:       "0",
		IdentityRetry:    500 * time.Millisecond,
		CacheSyncTimeout: run.CacheSyncTimeout,
	})
	if err == nil || ctx.Err() != nil {
		fmt.Printf("mcsd had not failed in a minute: %v\n", err)
		return 2
	}
	fmt.Printf("mcsd failed: %q\n", err.Error())
	return 1
}

// testMissingGrant runs mcsd, in a process of its own, as the ServiceAccount
// of cfg, once the API server refuses it list and watch of Services (its
// ClusterRole changed by the caller): the caches cannot sync, so mcsd
// exits once the bound on their sync has passed, and says which kind it
// could not read and why.
func testMissingGrant(t *testing.T, cfg *rest.Config) {
	t.Helper()
	waitRefused(t, cfg, "", "services", "list", "watch")
	failed, out := runUnsynced(t, cfg, "")
	for _, want := range []string{`the caches have not synced in 3s`, `RBAC`, `\*v1\.Service: `, `forbidden`, `cannot (list|watch) resource "services"`} {
		if !regexp.MustCompile(want).MatchString(failed) {
			t.Errorf("mcsd's error %q does not match %q; its output:\n%s", failed, want, out)
		}
	}
}

// testUnansweredList runs mcsd, in a process of its own, as the
// ServiceAccount of cfg, with every request for the Services of every
// namespace held, unanswered: the caches cannot sync, no request fails,
// and mcsd exits once the bound on their sync has passed, naming the kind
// whose list has not returned.
func testUnansweredList(t *testing.T, cfg *rest.Config) {
	t.Helper()
	failed, out := runUnsynced(t, cfg, "/api/v1/services")
	want := "the caches have not synced in 3s: *v1.Service: its first list has not returned, and no list or watch of it failed"
	if failed != want {
		t.Errorf("mcsd's error %q, want %q; its output:\n%s", failed, want, out)
	}
}

// runUnsynced runs mcsd as cfg's user, in a process of its own, with a
// bound of 3 s on its caches' first sync and the GET requests of hold
// held (unsyncedRun.Hold), and checks that it failed, past the bound.
// It returns mcsd's error and the process's output.
func runUnsynced(t *testing.T, cfg *rest.Config, hold string) (failed, output string) {
	t.Helper()
	const bound = 3 * time.Second
	run, err := json.Marshal(unsyncedRun{Host: cfg.Host, ServerName: cfg.ServerName, CAFile: cfg.CAFile, CAData: cfg.CAData,
		Insecure: cfg.Insecure, Token: cfg.BearerToken, CacheSyncTimeout: bound, Hold: hold})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0])
	cmd.Env = append(os.Environ(), unsyncedEnv+"="+string(run))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("mcsd: %v, want exit code 1 (it failed):\n%s", err, out.String())
	}
	if took < bound {
		t.Errorf("mcsd failed after %s, before its bound of %s:\n%s", took, bound, out.String())
	}
	for line := range strings.Lines(out.String()) {
		if q, ok := strings.CutPrefix(line, "mcsd failed: "); ok {
			if failed, err = strconv.Unquote(strings.TrimSpace(q)); err != nil {
				t.Fatalf("mcsd's error %s: %v", q, err)
			}
		}
	}
	t.Logf("mcsd failed after %s: %s", took.Round(time.Millisecond), failed)
	return failed, out.String()
}

// waitRefused waits until the API server refuses cfg's user every verb of
// verbs on resource of group, cluster-wide: a changed role takes effect
// once the API server's RBAC cache has seen it.
func waitRefused(t *testing.T, cfg *rest.Config, group, resource string, verbs ...string) {
	t.Helper()
	cl, err := client.New(cfg, client.Options{Scheme: manager.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, timeout, fmt.Sprintf("%s of %s refused", strings.Join(verbs, " and "), resource), func() (bool, string) {
		for _, verb := range verbs {
			r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: group, Resource: resource, Verb: verb},
			}}
			if err := cl.Create(context.Background(), r); err != nil {
				return false, err.Error()
			}
			if r.Status.Allowed {
				return false, verb + " still allowed"
			}
		}
		return true, ""
	})
}

// withoutVerbs returns role with no grant of verbs on resource of group:
// the rules that grant it lose those verbs for that resource alone.
func withoutVerbs(role *rbacv1.ClusterRole, group, resource string, verbs ...string) *rbacv1.ClusterRole {
	out := role.DeepCopy()
	out.Rules = nil
	for _, rule := range role.Rules {
		if !slices.Contains(rule.APIGroups, group) || !slices.Contains(rule.Resources, resource) {
			out.Rules = append(out.Rules, rule)
			continue
		}
		if others := slices.DeleteFunc(slices.Clone(rule.Resources), func(r string) bool { return r == resource }); len(others) > 0 {
			r := *rule.DeepCopy()
			r.Resources = others
			out.Rules = append(out.Rules, r)
		}
		if left := slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return slices.Contains(verbs, v) }); len(left) > 0 {
			r := *rule.DeepCopy()
			r.Resources, r.Verbs = []string{resource}, left
			out.Rules = append(out.Rules, r)
		}
	}
	return out
}
