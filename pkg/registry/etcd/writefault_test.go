package etcd_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

// fault runs hook, once, around the next KV write (a Put, or a Txn that puts
// or deletes) of the client.
type fault struct {
	mu   sync.Mutex
	hook func(invoke func() error) error
}

func (f *fault) arm(hook func(invoke func() error) error) {
	f.mu.Lock()
	f.hook = hook
	f.mu.Unlock()
}

func (f *fault) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	invoke := func() error { return invoker(ctx, method, req, reply, cc, opts...) }
	if !isWrite(req) {
		return invoke()
	}
	f.mu.Lock()
	hook := f.hook
	f.hook = nil
	f.mu.Unlock()
	if hook == nil {
		return invoke()
	}
	return hook(invoke)
}

func isWrite(req any) bool {
	switch r := req.(type) {
	case *etcdserverpb.PutRequest:
		return true
	case *etcdserverpb.TxnRequest:
		for _, op := range r.Success {
			if op.GetRequestPut() != nil || op.GetRequestDeleteRange() != nil {
				return true
			}
		}
	}
	return false
}

func openFaulty(t *testing.T, url string) (*etcd.Backend, *fault) {
	f := &fault{}
	b := open(t, url, registry.Identity{ClusterSet: "set1", Cluster: "a"}, func(o *etcd.Options) {
		o.DialOptions = append(o.DialOptions, grpc.WithChainUnaryInterceptor(f.interceptor))
	})
	return b, f
}

// lostAnswer: the write lands, the client hears a timeout.
func lostAnswer(invoke func() error) error {
	if err := invoke(); err != nil {
		return err
	}
	return rpctypes.ErrGRPCTimeout
}

func present(t *testing.T, cli *clientv3.Client, key string) bool {
	resp, err := cli.Get(t.Context(), key)
	must(t, err)
	return len(resp.Kvs) == 1
}

// A Publish whose reply is lost (it landed), then a withdrawal: DeleteExport
// deletes what landed.
func TestWithdrawAfterAPublishWhoseReplyWasLost(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	v := watchView(t, a)
	exportKey := "/test/set1/clusters/a/exports/shop/web"

	f.arm(lostAnswer)
	if err := a.Publish(t.Context(), web, spec, groups); err == nil {
		t.Fatal("Publish succeeded, want the injected error")
	}
	waitView(t, v, web, "a,eps:a", "") // it landed; every cluster sees it
	must(t, a.DeleteExport(t.Context(), web))
	if present(t, cli, exportKey) {
		t.Errorf("DeleteExport returned nil, but %s is still in etcd (and in every View: %q)", exportKey, counted(v, web))
	}
}

// A change whose reply is lost, seen by the watch before the error comes
// back; the value then goes back to what it was: it is written.
func TestValueBackAfterAWriteWhoseReplyWasLost(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	v := watchView(t, a)
	exportKey := "/test/set1/clusters/a/exports/shop/web"
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")

	f.arm(func(invoke func() error) error {
		if err := invoke(); err != nil {
			return err
		}
		poll.Until(t, waitFor, "the watch to see spec2", func() (bool, string) {
			ex := v.Exports(web)
			return len(ex) == 1 && ex[0].Spec.Ports[0].Port == 81, ""
		})
		return rpctypes.ErrGRPCTimeout
	})
	if err := a.PutExport(t.Context(), web, spec2); err == nil {
		t.Fatal("PutExport succeeded, want the injected error")
	}
	// The desired spec goes back to spec; the View shows spec2, so the
	// controller publishes spec.
	must(t, a.Publish(t.Context(), web, spec, groups))
	got := string(getKey(t, cli, exportKey).Value)
	if got != mustJSON(t, map[string]any{"spec": spec}) {
		t.Errorf("after Publish(spec) returned nil, etcd holds %s", got)
	}
}

// Someone else deletes the record while a write of a new value to it is
// under way, and that write fails: the next put writes the record again.
func TestDeletionDuringAFailedWriteRepaired(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	v := watchView(t, a)
	exportKey := "/test/set1/clusters/a/exports/shop/web"
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")

	f.arm(func(invoke func() error) error {
		_, err := cli.Delete(t.Context(), exportKey)
		must(t, err)
		poll.Until(t, waitFor, "the watch to see the deletion", func() (bool, string) {
			return len(v.Exports(web)) == 0, ""
		})
		return status.Error(codes.Unavailable, "injected: no answer")
	})
	if err := a.PutExport(t.Context(), web, spec2); err == nil {
		t.Fatal("PutExport succeeded, want the injected error")
	}
	must(t, a.Publish(t.Context(), web, spec, groups))
	if !present(t, cli, exportKey) {
		t.Errorf("after Publish(spec) returned nil, %s is missing", exportKey)
	}
}

// Someone else changes the record right after this backend's write landed,
// and the watch sees it before the write returns: the next put of the same
// value writes it again.
func TestChangeSeenBeforeTheWriteReturnsRepaired(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	v := watchView(t, a)
	exportKey := "/test/set1/clusters/a/exports/shop/web"
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")
	lease := leaseOf(t, cli, exportKey)

	f.arm(func(invoke func() error) error {
		if err := invoke(); err != nil {
			return err
		}
		_, err := cli.Put(t.Context(), exportKey, "garbage", clientv3.WithLease(lease))
		must(t, err)
		poll.Until(t, waitFor, "the watch to see the change", func() (bool, string) {
			return refused(v, web) != "", ""
		})
		return nil
	})
	must(t, a.PutExport(t.Context(), web, spec2))
	must(t, a.PutExport(t.Context(), web, spec2))
	if got := string(getKey(t, cli, exportKey).Value); got != mustJSON(t, map[string]any{"spec": spec2}) {
		t.Errorf("after PutExport(spec2) returned nil, etcd holds %s", got)
	}
}

// A failed write marks the record lost; the retry lands, then someone else
// changes it and the watch sees that before the retry returns: the next put
// of the same value writes it again.
func TestChangeDuringTheRetryOfAFailedWriteRepaired(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	v := watchView(t, a)
	exportKey := "/test/set1/clusters/a/exports/shop/web"
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")
	lease := leaseOf(t, cli, exportKey)

	f.arm(lostAnswer)
	if err := a.PutExport(t.Context(), web, spec2); err == nil {
		t.Fatal("want injected error")
	}
	f.arm(func(invoke func() error) error {
		if err := invoke(); err != nil {
			return err
		}
		_, err := cli.Put(t.Context(), exportKey, "garbage", clientv3.WithLease(lease))
		must(t, err)
		poll.Until(t, waitFor, "the watch to see the change", func() (bool, string) {
			return refused(v, web) != "", ""
		})
		return nil
	})
	must(t, a.PutExport(t.Context(), web, spec2))
	must(t, a.PutExport(t.Context(), web, spec2))
	if got := string(getKey(t, cli, exportKey).Value); got != mustJSON(t, map[string]any{"spec": spec2}) {
		t.Errorf("after PutExport(spec2) returned nil, etcd holds %s", got)
	}
}

// The alive record is deleted; while its repair write is under way (after
// it landed) it is deleted again, and the watch sees that before the write
// returns: it is repaired again.
func TestAliveDeletedDuringItsRepairRepairedAgain(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	v := watchView(t, a)
	aliveKey := "/test/set1/clusters/a/alive"
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")

	var second atomic.Bool
	f.arm(func(invoke func() error) error {
		if err := invoke(); err != nil {
			return err
		}
		waitView(t, v, web, "a,eps:a", "") // the repair seen
		_, err := cli.Delete(t.Context(), aliveKey)
		must(t, err)
		second.Store(true)
		poll.Until(t, waitFor, "the watch to see the second deletion", func() (bool, string) {
			return counted(v, web) == "", ""
		})
		return nil
	})
	_, err := cli.Delete(t.Context(), aliveKey)
	must(t, err)
	poll.Until(t, waitFor, "the second deletion", func() (bool, string) { return second.Load(), "" })
	poll.Until(t, waitFor, "the alive record repaired again", func() (bool, string) {
		return present(t, cli, aliveKey), "View counts " + counted(v, web)
	})
}

// A put whose reply is lost lands (spec2); the controller, whose View shows
// spec2, writes nothing more. The lease is then lost: its repair writes
// spec2, the value wanted, not spec back over it.
func TestLeaseRepairWritesTheValueWanted(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	v := watchView(t, a)
	exportKey := "/test/set1/clusters/a/exports/shop/web"
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")
	f.arm(lostAnswer)
	if err := a.PutExport(t.Context(), web, spec2); err == nil {
		t.Fatal("want injected error")
	}
	lease := leaseOf(t, cli, exportKey)
	_, err := cli.Revoke(t.Context(), lease)
	must(t, err)
	poll.Until(t, waitFor, "the records back on a new lease", func() (bool, string) {
		kv, err := cli.Get(t.Context(), exportKey)
		return err == nil && len(kv.Kvs) == 1 && clientv3.LeaseID(kv.Kvs[0].Lease) != lease, ""
	})
	if got := string(getKey(t, cli, exportKey).Value); got != mustJSON(t, map[string]any{"spec": spec2}) {
		t.Errorf("after the lease repair etcd holds %s, the value before the landed write", got)
	}
}

// A withdrawal whose reply is lost (it landed), then a lost lease: its
// repair writes what the backend holds, which no longer has the withdrawn
// records.
func TestWithdrawalWhoseReplyWasLostStaysWithdrawn(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	v := watchView(t, a)
	exportKey := "/test/set1/clusters/a/exports/shop/web"
	aliveKey := "/test/set1/clusters/a/alive"
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")

	f.arm(lostAnswer)
	if err := a.DeleteExport(t.Context(), web); err == nil {
		t.Fatal("DeleteExport succeeded, want the injected error")
	}
	lease := leaseOf(t, cli, aliveKey)
	_, err := cli.Revoke(t.Context(), lease)
	must(t, err)
	poll.Until(t, waitFor, "the alive record back on a new lease", func() (bool, string) {
		resp, err := cli.Get(t.Context(), aliveKey)
		return err == nil && len(resp.Kvs) == 1 && clientv3.LeaseID(resp.Kvs[0].Lease) != lease, ""
	})
	if present(t, cli, exportKey) {
		t.Error("the lease repair wrote a withdrawn export back")
	}
}
