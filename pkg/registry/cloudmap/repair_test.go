package cloudmap

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// TestOwnRecordsRepaired: mcsd's own instances deregistered by someone else
// are seen gone by the backend's watch, and the next put (the export
// controller's, when its View shows them gone) registers them again, even
// with the values last written; a put with nothing lost writes nothing.
func TestOwnRecordsRepaired(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	id := registry.Identity{ClusterSet: randName("repair"), Cluster: "east"}
	key := randWebKey()
	a := openBackend(t, motoOptions(srv, id, 30*time.Second))

	v := clusterset.NewView()
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Watch(wctx, v) }()
	t.Cleanup(func() { cancel(); <-done })

	putWeb(t, a, key, "10.0.0.1", "10.0.0.2")
	has := func(addrs int) func() (bool, string) {
		return func() (bool, string) {
			eps, ok := v.Endpoints(key)["east"]
			n := 0
			if ok && len(eps.Groups) > 0 {
				n = len(eps.Groups[0].Endpoints)
			}
			return len(v.Exports(key)) == 1 && n == addrs, fmt.Sprintf("%d exports, %d endpoints", len(v.Exports(key)), n)
		}
	}
	poll.Until(t, 20*time.Second, "the View to hold east's export and 2 endpoints", has(2))

	// Someone deregisters one of east's endpoints.
	svcID := a.own[key].svc.ID
	var victim string
	for instID, at := range rawInstances(t, c, key.Namespace, key.Name) {
		if at[attrRecord] == recordEndpoint && victim == "" {
			victim = instID
		}
	}
	if victim == "" {
		t.Fatal("no endpoint instance found")
	}
	_, err := c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(victim)})
	mustDo(t, err)
	poll.Until(t, 20*time.Second, "the View to show the endpoint gone", has(1))

	// The same put as before registers it again.
	mustDo(t, a.PutEndpoints(ctx, key, webGroups("10.0.0.1", "10.0.0.2")))
	if _, ok := rawInstances(t, c, key.Namespace, key.Name)[victim]; !ok {
		t.Fatalf("instance %s not registered again", victim)
	}
	poll.Until(t, 20*time.Second, "the View to hold both endpoints again", has(2))
	poll.Until(t, 20*time.Second, "the backend to see its records as written", func() (bool, string) {
		a.ownWatch.mu.Lock()
		defer a.ownWatch.mu.Unlock()
		return !a.ownWatch.lost[key], "still lost"
	})

	// The service record too (in the records service): the export goes,
	// and comes back.
	_, err = c.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{
		ServiceId:  aws.String(a.systemService(recordsService).ID),
		InstanceId: aws.String(recordID(a.enc.prefix, key)),
	})
	mustDo(t, err)
	poll.Until(t, 20*time.Second, "the View to show the export gone", func() (bool, string) {
		return len(v.Exports(key)) == 0, ""
	})
	mustDo(t, a.PutExport(ctx, key, webSpec))
	poll.Until(t, 20*time.Second, "the View to hold the export again", has(2))
}
