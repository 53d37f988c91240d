package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// leaseServer is a minimal API server holding one Lease.
type leaseServer struct {
	mu    sync.Mutex
	lease *coordinationv1.Lease
	rv    int
	// gate, when set, holds every request until it is closed.
	gate chan struct{}
}

func (s *leaseServer) holder() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil || s.lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *s.lease.Spec.HolderIdentity
}

func (s *leaseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !strings.HasPrefix(r.URL.Path, "/apis/coordination.k8s.io/v1/namespaces/") {
		w.WriteHeader(404)
		return
	}
	writeErr := func(st *apierrors.StatusError) {
		w.WriteHeader(int(st.ErrStatus.Code))
		st.ErrStatus.APIVersion, st.ErrStatus.Kind = "v1", "Status"
		_ = json.NewEncoder(w).Encode(st.ErrStatus)
	}
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	switch r.Method {
	case http.MethodGet:
		if s.lease == nil {
			writeErr(apierrors.NewNotFound(gr, "mcsd-leader"))
			return
		}
	case http.MethodPost, http.MethodPut:
		l := &coordinationv1.Lease{}
		if err := json.NewDecoder(r.Body).Decode(l); err != nil {
			w.WriteHeader(400)
			return
		}
		if r.Method == http.MethodPost && s.lease != nil {
			writeErr(apierrors.NewAlreadyExists(gr, l.Name))
			return
		}
		if r.Method == http.MethodPut && l.ResourceVersion != s.lease.ResourceVersion {
			writeErr(apierrors.NewConflict(gr, l.Name, errors.New("rv")))
			return
		}
		s.rv++
		l.ResourceVersion = strconv.Itoa(s.rv)
		s.lease = l
	}
	l := s.lease.DeepCopy()
	l.APIVersion, l.Kind = "coordination.k8s.io/v1", "Lease"
	_ = json.NewEncoder(w).Encode(l)
}

// TestLeaseHeldUntilTheControllersStop: with leader election, a stop (a
// SIGTERM ends ctx) keeps the lease, and runWithLeadership waits, until the
// controllers have stopped; then the lease is released, and the
// controllers' error returned. A standby must not lead while this replica
// still writes.
func TestLeaseHeldUntilTheControllersStop(t *testing.T) {
	ls := &leaseServer{}
	srv := httptest.NewServer(ls)
	defer srv.Close()

	errStop := errors.New("the controllers' stop error")
	leading := make(chan struct{})
	var returned, releasedEarly, returnedEarly atomic.Bool
	opts := Options{
		RESTConfig:     &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}},
		LeaderElection: true,
		// runControllers' first step stands for the controllers, which
		// take a while to stop (reconciles and registry writes under way):
		// for a second, the lease stays held and nothing returns.
		OpenRegistry: func(ctx context.Context, _ registry.Identity) (registry.Registry, error) {
			close(leading)
			<-ctx.Done()
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if ls.holder() == "" {
					releasedEarly.Store(true)
				}
				if returned.Load() {
					returnedEarly.Store(true)
				}
			}
			return nil, errStop
		},
	}
	if err := opts.defaults(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := runWithLeadership(ctx, opts, apiClients{}, registry.Identity{Cluster: "c1", ClusterSet: "set"}, &health{}, "")
		returned.Store(true)
		done <- err
	}()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("never led")
	}
	cancel() // SIGTERM
	err := <-done
	if releasedEarly.Load() {
		t.Error("the lease was released while the controllers were stopping")
	}
	if returnedEarly.Load() {
		t.Error("runWithLeadership returned while the controllers were stopping")
	}
	if !errors.Is(err, errStop) {
		t.Errorf("runWithLeadership = %v, want the controllers' error", err)
	}
	if h := ls.holder(); h != "" {
		t.Errorf("lease still held by %q after the stop", h)
	}
}

// TestIdentityChangeIsNoLossOfLeadership: controllers that stop by
// themselves (the cluster's identity changed) release the lease without
// saying that leadership was lost.
func TestIdentityChangeIsNoLossOfLeadership(t *testing.T) {
	ls := &leaseServer{}
	srv := httptest.NewServer(ls)
	defer srv.Close()
	opts := Options{
		RESTConfig:     &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}},
		LeaderElection: true,
		OpenRegistry: func(context.Context, registry.Identity) (registry.Registry, error) {
			return nil, errIdentityChanged
		},
	}
	if err := opts.defaults(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logged []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{})
	ctx := logr.NewContext(t.Context(), log)
	err := runWithLeadership(ctx, opts, apiClients{}, registry.Identity{Cluster: "c1", ClusterSet: "set"}, &health{}, "")
	if !errors.Is(err, errIdentityChanged) {
		t.Errorf("runWithLeadership = %v, want errIdentityChanged", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, l := range logged {
		if strings.Contains(l, "leadership lost") {
			t.Errorf("logged %s on an identity change", l)
		}
	}
	if h := ls.holder(); h != "" {
		t.Errorf("lease still held by %q", h)
	}
}

// TestLeaderNotReadyUntilItWorks: a standby is ready (a rollout goes on
// while it waits); once it leads, it is not, until its registry is read
// and its caches have synced.
func TestLeaderNotReadyUntilItWorks(t *testing.T) {
	ls := &leaseServer{}
	srv := httptest.NewServer(ls)
	defer srv.Close()
	opening, release := make(chan struct{}), make(chan struct{})
	opts := Options{
		RESTConfig:     &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}},
		LeaderElection: true,
		OpenRegistry: func(context.Context, registry.Identity) (registry.Registry, error) {
			close(opening)
			<-release
			return nil, errors.New("registry unreachable")
		},
	}
	if err := opts.defaults(); err != nil {
		t.Fatal(err)
	}
	h := &health{}
	done := make(chan error, 1)
	go func() {
		done <- runWithLeadership(t.Context(), opts, apiClients{}, registry.Identity{Cluster: "c1", ClusterSet: "set"}, h, "")
	}()
	select {
	case <-opening:
	case err := <-done:
		t.Fatalf("runWithLeadership returned before it led: %v", err)
	}
	if err := h.check(); err == nil {
		t.Error("/readyz ok while the leader opens its registry")
	}
	close(release)
	if err := <-done; err == nil {
		t.Error("runWithLeadership = nil with a registry that cannot be opened")
	}
}

// TestStandbyNotReadyWhileIDInUse: a replica whose last try found the
// cluster id in use by another cluster is not ready until it leads (and
// tries again) or another replica does; one without that is ready as a
// standby at once.
func TestStandbyNotReadyWhileIDInUse(t *testing.T) {
	const inUse = "cluster id in use by another cluster: …"
	for _, tc := range []struct {
		name        string
		inUse       string
		heldByOther bool
	}{
		{"another replica leads", "", true},
		{"in use, then another replica leads", inUse, true},
		{"in use, then this replica leads", inUse, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := &leaseServer{gate: make(chan struct{})}
			if tc.heldByOther {
				holder := "other"
				now := metav1.NewMicroTime(time.Now())
				ls.lease = &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder,
					LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &now, AcquireTime: &now}}
				ls.lease.Name, ls.lease.Namespace, ls.lease.ResourceVersion = "mcsd-leader", "mcsd-system", "1"
			}
			srv := httptest.NewServer(ls)
			defer srv.Close()
			opened := make(chan struct{})
			opts := Options{
				RESTConfig:     &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}},
				LeaderElection: true,
				OpenRegistry: func(context.Context, registry.Identity) (registry.Registry, error) {
					close(opened)
					return nil, errors.New("registry unreachable")
				},
			}
			if err := opts.defaults(); err != nil {
				t.Fatal(err)
			}
			h := &health{}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- runWithLeadership(ctx, opts, apiClients{}, registry.Identity{Cluster: "c1", ClusterSet: "set"}, h, tc.inUse)
			}()
			// Before the lease is read: ready as a standby, or not, for
			// the id in use.
			poll.Until(t, 10*time.Second, "the standby's readiness", func() (bool, string) {
				err := h.check()
				if tc.inUse == "" {
					return err == nil, fmt.Sprint(err)
				}
				return err != nil && err.Error() == tc.inUse, fmt.Sprint(err)
			})
			close(ls.gate)
			if tc.heldByOther {
				poll.Until(t, 10*time.Second, "ready as a standby once another replica leads", func() (bool, string) {
					err := h.check()
					return err == nil, fmt.Sprint(err)
				})
				cancel()
				if err := <-done; err != nil {
					t.Errorf("runWithLeadership: %v", err)
				}
				return
			}
			// This replica leads: it tries again, and is not ready meanwhile.
			<-opened
			if err := <-done; err == nil {
				t.Error("runWithLeadership returned no error with the registry failing")
			}
			if err := h.check(); err == nil {
				t.Error("ready after the leader's registry failed")
			}
		})
	}
}
