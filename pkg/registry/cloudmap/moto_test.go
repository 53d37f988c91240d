package cloudmap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// One moto server serves every test of the package, each top-level test in
// an AWS account of its own (accounts), and within it apart by clusterset,
// namespace and cluster names.
var (
	motoOnce sync.Once
	motoSrv  *mototest.Server
	motoErr  error
	// accounts are the views of motoSrv in each top-level test's account,
	// by the test's name; lastAccount numbers the accounts.
	accounts    sync.Map
	lastAccount atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	accounts.Range(func(_, s any) bool {
		s.(*mototest.Server).Stop()
		return true
	})
	if motoSrv != nil {
		motoSrv.Stop()
	}
	os.Exit(code)
}

// moto returns the shared server, starting it on first use, in the account
// of t's top-level test: its subtests, and every call of the test, share it.
// A watch's first read sweeps every namespace of its account; in one account
// for the whole package, each test's first reads grew with the namespaces of
// the tests before it (10 to 19 s late in a run of the package beside the
// others, against bounds of 15 to 20 s; two CI runs failed on such bounds).
func moto(t *testing.T) *mototest.Server {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("the Cloud Map tests need python3 on PATH to run moto: ", err)
	}
	motoOnce.Do(func() { motoSrv, motoErr = mototest.Run(context.Background()) })
	if motoErr != nil {
		t.Fatal(motoErr)
	}
	test, _, _ := strings.Cut(t.Name(), "/")
	if s, ok := accounts.Load(test); ok {
		return s.(*mototest.Server)
	}
	// Not moto's default account, 123456789012.
	s := motoSrv.InAccount(fmt.Sprintf("%012d", 100000000000+lastAccount.Add(1)))
	if held, loaded := accounts.LoadOrStore(test, s); loaded {
		s.Stop()
		return held.(*mototest.Server)
	}
	return s
}

// motoOptions are the options of a backend against srv, with short
// intervals.
func motoOptions(srv *mototest.Server, id registry.Identity, ttl time.Duration) Options {
	return Options{
		Identity:      id,
		Region:        mototest.Region,
		Endpoint:      srv.URL,
		Credentials:   mototest.Credentials,
		TTL:           ttl,
		PollInterval:  250 * time.Millisecond,
		SweepInterval: 30 * time.Second,
		MaxAttempts:   5,
		MaxBackoff:    500 * time.Millisecond,
	}
}

// openClosed opens a backend or watcher of opts with newFn, closed at the
// end of the test.
func openClosed[T io.Closer](t *testing.T, newFn func(context.Context, Options) (T, error), opts Options) T {
	t.Helper()
	c, err := newFn(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func openBackend(t *testing.T, opts Options) *Backend {
	t.Helper()
	return openClosed(t, New, opts)
}

// openMember opens the backend of cluster in clusterset cs against srv.
func openMember(t *testing.T, srv *mototest.Server, cs, cluster string, ttl time.Duration) *Backend {
	t.Helper()
	return openBackend(t, motoOptions(srv, registry.Identity{ClusterSet: cs, Cluster: cluster}, ttl))
}

// rawClient is a plain client of srv, for what other writers do.
func rawClient(t *testing.T, srv *mototest.Server) *sd.Client {
	t.Helper()
	opts := Options{Identity: registry.Identity{ClusterSet: "raw", Cluster: "raw"}, Region: mototest.Region, Endpoint: srv.URL, Credentials: mototest.Credentials}
	opts.Default()
	c, err := NewClient(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func randName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// randWebKey is the key of a Service named web in a namespace that no other
// test uses.
func randWebKey() registry.ServiceKey {
	return registry.ServiceKey{Namespace: randName("ns"), Name: "web"}
}

// TestConformance runs the shared suite on a moto server of its own: every
// watcher checks every Cloud Map service of the account each poll, and the
// other tests' services would slow moto down.
func TestConformance(t *testing.T) {
	moto(t)
	srv := mototest.Start(t)
	factory := func(t *testing.T, id registry.Identity, ttl time.Duration) registry.Registry {
		return openBackend(t, motoOptions(srv, id, ttl))
	}
	registrytest.Run(t, factory)
	registrytest.RunReadOnly(t, factory, func(t *testing.T, id registry.Identity) registry.Watcher {
		return openWatcher(t, motoOptions(srv, id, 0))
	})
	registrytest.RunInstances(t, func(t *testing.T, id registry.Identity, ttl time.Duration) (registry.Registry, error) {
		b, err := New(t.Context(), motoOptions(srv, id, ttl))
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = b.Close() })
		return b, nil
	})
	// The switch is a proxy that answers every call with a throttling
	// error.
	registrytest.RunLapse(t, func(t *testing.T, id registry.Identity, ttl time.Duration) (registry.Registry, registrytest.Switch, registrytest.Factory) {
		proxy := newThrottlingProxy(t, srv.URL)
		opts := motoOptions(srv, id, ttl)
		opts.Endpoint, opts.MaxAttempts = proxy.URL, 1
		return openBackend(t, opts), registrytest.Switch{
			Cut:  func() { proxy.throttling.Store(true) },
			Heal: func() { proxy.throttling.Store(false) },
		}, factory
	})
}

func openWatcher(t *testing.T, opts Options) *Watcher {
	t.Helper()
	return openClosed(t, NewWatcher, opts)
}

// rawInstances reads every instance of nsName/name.
func rawInstances(t *testing.T, c *sd.Client, nsName, name string) map[string]map[string]string {
	t.Helper()
	out, err := c.DiscoverInstances(t.Context(), &sd.DiscoverInstancesInput{
		NamespaceName: aws.String(nsName), ServiceName: aws.String(name), MaxResults: aws.Int32(1000),
	})
	if err != nil {
		t.Fatalf("discover %s/%s: %v", nsName, name, err)
	}
	m := map[string]map[string]string{}
	for _, in := range out.Instances {
		m[aws.ToString(in.InstanceId)] = in.Attributes
	}
	return m
}

// createHTTPNamespace creates the HTTP namespace name, and returns its id
// and the id of the operation that created it.
func createHTTPNamespace(t *testing.T, c *sd.Client, name string) (id, operationID string) {
	t.Helper()
	out, err := c.CreateHttpNamespace(t.Context(), &sd.CreateHttpNamespaceInput{Name: aws.String(name)})
	mustDo(t, err)
	op, err := c.GetOperation(t.Context(), &sd.GetOperationInput{OperationId: out.OperationId})
	mustDo(t, err)
	return op.Operation.Targets["NAMESPACE"], aws.ToString(out.OperationId)
}

// namespaceNamed returns the namespaces called name.
func namespacesNamed(t *testing.T, c *sd.Client, name string) []types.NamespaceSummary {
	t.Helper()
	out, err := c.ListNamespaces(t.Context(), &sd.ListNamespacesInput{})
	if err != nil {
		t.Fatal(err)
	}
	var found []types.NamespaceSummary
	for _, ns := range out.Namespaces {
		if aws.ToString(ns.Name) == name {
			found = append(found, ns)
		}
	}
	return found
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rawRecords reads the service records of key in clusterset cs, in the
// records service of the default system namespace, by instance id.
func rawRecords(t *testing.T, c *sd.Client, cs string, key registry.ServiceKey) map[string]map[string]string {
	t.Helper()
	out, err := c.DiscoverInstances(t.Context(), &sd.DiscoverInstancesInput{
		NamespaceName: aws.String(DefaultSystemNamespace), ServiceName: aws.String(recordsService), MaxResults: aws.Int32(1000),
		QueryParameters: map[string]string{attrClusterSetID: cs, attrNamespace: key.Namespace, attrService: key.Name},
	})
	if err != nil {
		t.Fatalf("discover service records: %v", err)
	}
	m := map[string]map[string]string{}
	for _, in := range out.Instances {
		m[aws.ToString(in.InstanceId)] = in.Attributes
	}
	return m
}
