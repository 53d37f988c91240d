package cloudmap

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// TestRealAWS runs against AWS Cloud Map when the environment has a region
// and credentials. It creates an HTTP namespace mcsd-test-<random> and a
// system namespace mcsd.test-<random>, and deletes both at the end.
func TestRealAWS(t *testing.T) {
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	hasCreds := false
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		hasCreds = hasCreds || os.Getenv(v) != ""
	}
	if region == "" || !hasCreds {
		t.Skip("skipping the test against real AWS Cloud Map: set AWS_REGION and credentials " +
			"(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE) to run it; it creates and deletes namespaces mcsd-test-* and mcsd.test-*")
	}
	ctx := t.Context()
	cs := randName("mcsd-test")
	system := "mcsd.test-" + cs[len("mcsd-test-"):]
	key := registry.ServiceKey{Namespace: randName("mcsd-test"), Name: "web"}
	open := func(cluster string) *Backend {
		b, err := New(ctx, Options{
			Identity:        registry.Identity{ClusterSet: cs, Cluster: cluster},
			Region:          region,
			SystemNamespace: system,
			CleanupEmpty:    true,
			TTL:             30 * time.Second,
			PollInterval:    2 * time.Second,
			SweepInterval:   time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	a := open("a")
	t.Cleanup(func() { deleteNamespaces(t, a.api, system, key.Namespace) })
	b := open("b")
	rec := registrytest.StartWatch(t, b)
	mustDo(t, a.PutExport(ctx, key, webSpec))
	mustDo(t, a.PutEndpoints(ctx, key, webGroups("10.0.0.1", "10.0.0.2")))
	id := registry.RecordID{Cluster: "a", Service: key}
	rec.WaitFor(t, 3*time.Minute, "a's records", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[id]
		g := v.Endpoints[id].Groups
		return x && len(g) == 1 && len(g[0].Endpoints) == 2
	})
	mustDo(t, a.DeleteExport(ctx, key))
	rec.WaitFor(t, 3*time.Minute, "a's records deleted", func(_ registrytest.Event, v *registrytest.View) bool {
		_, x := v.Exports[id]
		_, p := v.Endpoints[id]
		return !x && !p
	})
}

// deleteNamespaces deletes the namespaces with the given names and
// everything in them.
func deleteNamespaces(t *testing.T, api API, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := &Backend{reader: &reader{api: api, opts: Options{OperationTimeout: time.Minute}}}
	nss, err := listNamespaces(ctx, api)
	if err != nil {
		t.Errorf("clean up: %v", err)
		return
	}
	for _, ns := range nss {
		if !slices.Contains(names, ns.Name) {
			continue
		}
		svcs, err := listServices(ctx, api, ns)
		if err != nil {
			t.Errorf("clean up: %v", err)
			continue
		}
		for _, svc := range svcs {
			insts, err := b.discover(ctx, svc, nil)
			if err != nil {
				t.Errorf("clean up: %v", err)
			}
			for _, in := range insts {
				if err := b.deregister(ctx, svc, in.ID); err != nil {
					t.Errorf("clean up: %v", err)
				}
			}
			if _, err := api.DeleteService(ctx, &sd.DeleteServiceInput{Id: aws.String(svc.ID)}); err != nil {
				t.Errorf("clean up service %s: %v", svc.Name, err)
			}
		}
		out, err := api.DeleteNamespace(ctx, &sd.DeleteNamespaceInput{Id: aws.String(ns.ID)})
		if err != nil && !isNotFound(err) {
			t.Errorf("clean up namespace %s: %v", ns.Name, err)
			continue
		}
		if out != nil {
			_, _ = b.waitOperation(ctx, aws.ToString(out.OperationId))
		}
	}
}
