package registry_test

import (
	"context"
	"fmt"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/memory"
)

// printer is a registry.Handler that prints what a watch delivers, and
// reacts to the first full update with react.
type printer struct {
	react func()
	stop  context.CancelFunc
}

func (p *printer) OnUpdate(u registry.Update) {
	for _, e := range u.Exports {
		fmt.Printf("full=%v: %s exports %s as %s\n", u.Full, e.Cluster, e.Service, e.Spec.Type)
	}
	for _, e := range u.Endpoints {
		fmt.Printf("full=%v: %s serves %s at %v\n", u.Full, e.Cluster, e.Service, e.Groups[0].Endpoints[0].Addresses)
		p.stop()
	}
	if u.Full {
		p.react()
	}
}

func (p *printer) OnConnection(connected bool, _ error) {}

// Open a backend for two clusters of one clusterset (here the in-memory
// one; etcd and Cloud Map work alike), publish from one, and watch from the
// other: first the whole state, then each change.
func Example() {
	store := memory.NewStore()
	east, _ := store.Open(memory.Options{Identity: registry.Identity{ClusterSet: "prod", Cluster: "east"}})
	west, _ := store.Open(memory.Options{Identity: registry.Identity{ClusterSet: "prod", Cluster: "west"}})
	defer east.Close()
	defer west.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	web := registry.ServiceKey{Namespace: "shop", Name: "web"}
	_ = east.PutExport(ctx, web, registry.ServiceSpec{
		Type:  registry.ClusterSetIP,
		Ports: []registry.Port{{Name: "http", Protocol: "TCP", Port: 80}},
	})

	h := &printer{stop: cancel, react: func() {
		_ = east.PutEndpoints(ctx, web, []registry.EndpointGroup{{
			AddressType: "IPv4",
			Endpoints:   []registry.Endpoint{{Addresses: []string{"10.1.0.7"}, Ready: true}},
		}})
	}}
	err := west.Watch(ctx, h) // returns when the handler cancels ctx
	fmt.Println("watch ended:", err)
	// Output:
	// full=true: east exports shop/web as ClusterSetIP
	// full=false: east serves shop/web at [10.1.0.7]
	// watch ended: context canceled
}
