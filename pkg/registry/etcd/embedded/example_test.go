package embedded_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd/embedded"
)

// Start a single-node etcd on free loopback ports, wait until it is ready,
// and use it as mcsd's registry.
func Example() {
	dir, _ := os.MkdirTemp("", "mcsd-etcd-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	srv, err := embedded.Start(ctx, embedded.Config{
		DataDir:         filepath.Join(dir, "etcd"),
		ListenClientURL: "http://127.0.0.1:0",
		ListenPeerURL:   "http://127.0.0.1:0",
		UnsafeNoFsync:   true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	<-srv.ReadyNotify()

	reg, err := etcd.New(ctx, etcd.Options{
		Endpoints: []string{srv.ClientURL()},
		Identity:  registry.Identity{ClusterSet: "try-out", Cluster: "east"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Close()
	_ = reg.PutExport(ctx, registry.ServiceKey{Namespace: "shop", Name: "web"}, registry.ServiceSpec{Type: registry.ClusterSetIP})
	exported, _ := reg.Exported(ctx)
	fmt.Println(exported)
	// Output: [shop/web]
}
