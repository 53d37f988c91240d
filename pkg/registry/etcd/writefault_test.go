package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mcsd-io/mcsd/internal/clusterset"
	"github.com/mcsd-io/mcsd/internal/testutil/poll"
	"github.com/mcsd-io/mcsd/pkg/registry"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
	"github.com/mcsd-io/mcsd/pkg/registry/registrytest"
)

// fault runs hook, once, around the next KV write (a Put, or a Txn that puts
// or deletes) of the client.
type fault struct {
	mu   sync.Mutex
	hook func(ctx context.Context, invoke func() error) error
	// hang is a key whose every read waits for its context's end.
	hang string
	// slow is how long every write waits before it is sent.
	slow time.Duration
}

// slowWrites makes every write wait d before it is sent.
func (f *fault) slowWrites(d time.Duration) {
	f.mu.Lock()
	f.slow = d
	f.mu.Unlock()
}

// hangReads makes every read of key wait for its context's end, until the
// function returned is called.
func (f *fault) hangReads(key string) (stop func()) {
	f.mu.Lock()
	f.hang = key
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.hang = ""
		f.mu.Unlock()
	}
}

func (f *fault) arm(hook func(invoke func() error) error) {
	f.armWithContext(func(_ context.Context, invoke func() error) error { return hook(invoke) })
}

// armWithContext arms hook, which is also given the write's context.
func (f *fault) armWithContext(hook func(ctx context.Context, invoke func() error) error) {
	f.mu.Lock()
	f.hook = hook
	f.mu.Unlock()
}

func (f *fault) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	invoke := func() error { return invoker(ctx, method, req, reply, cc, opts...) }
	if r, ok := req.(*etcdserverpb.RangeRequest); ok {
		f.mu.Lock()
		hang := f.hang != "" && string(r.Key) == f.hang
		f.mu.Unlock()
		if hang {
			<-ctx.Done()
			return ctx.Err()
		}
	}
	if !isWrite(req) {
		return invoke()
	}
	f.mu.Lock()
	hook, slow := f.hook, f.slow
	f.hook = nil
	f.mu.Unlock()
	if slow > 0 {
		select {
		case <-time.After(slow):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if hook == nil {
		return invoke()
	}
	return hook(ctx, invoke)
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
	return openFaultyAs(t, url, registry.Identity{ClusterSet: "set1", Cluster: "a"})
}

// openFaultyAs opens a backend of id whose writes can be faulted.
func openFaultyAs(t *testing.T, url string, id registry.Identity, modify ...func(*etcd.Options)) (*etcd.Backend, *fault) {
	f := &fault{}
	b := open(t, url, id, append(modify, func(o *etcd.Options) {
		o.DialOptions = append(o.DialOptions, grpc.WithChainUnaryInterceptor(f.interceptor))
	})...)
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

// faultyExport is a backend of cluster a whose writes can be faulted, with
// a View of the clusterset through it, and a plain client of the etcd.
type faultyExport struct {
	cli *clientv3.Client
	a   *etcd.Backend
	f   *fault
	v   *clusterset.View
}

const (
	faultExportKey = "/test/set1/clusters/a/exports/shop/web"
	faultAliveKey  = "/test/set1/clusters/a/alive"
)

// startFaulty starts an etcd and a faulty backend of cluster a; published,
// with web exported and seen.
func startFaulty(t *testing.T, published bool) faultyExport {
	t.Helper()
	srv, cli := startWithClient(t)
	a, f := openFaulty(t, srv.ClientURL())
	x := faultyExport{cli: cli, a: a, f: f, v: watchView(t, a)}
	if published {
		must(t, a.Publish(t.Context(), web, spec, groups))
		waitView(t, x.v, web, "a,eps:a", "")
	}
	return x
}

// changeAfterLanding is a fault: the write lands, then someone else writes
// garbage over the export, and the watch sees it, before the reply comes.
func (x faultyExport) changeAfterLanding(t *testing.T) func(invoke func() error) error {
	lease := leaseOf(t, x.cli, faultExportKey)
	return func(invoke func() error) error {
		if err := invoke(); err != nil {
			return err
		}
		_, err := x.cli.Put(t.Context(), faultExportKey, "garbage", clientv3.WithLease(lease))
		must(t, err)
		poll.Until(t, waitFor, "the watch to see the change", func() (bool, string) {
			return refused(x.v, web) != "", ""
		})
		return nil
	}
}

// deleteAfterLanding is a fault: the write lands, then someone else deletes
// the export, and the watch sees it, before the reply comes.
func (x faultyExport) deleteAfterLanding(t *testing.T) func(invoke func() error) error {
	return func(invoke func() error) error {
		if err := invoke(); err != nil {
			return err
		}
		_, err := x.cli.Delete(t.Context(), faultExportKey)
		must(t, err)
		poll.Until(t, waitFor, "the watch to see the deletion", func() (bool, string) {
			return len(x.v.Exports(web)) == 0, ""
		})
		return nil
	}
}

// loseLease revokes the backend's lease and waits for its repair: the alive
// record back on a new lease.
func (x faultyExport) loseLease(t *testing.T) {
	t.Helper()
	lease := leaseOf(t, x.cli, faultAliveKey)
	_, err := x.cli.Revoke(t.Context(), lease)
	must(t, err)
	poll.Until(t, waitFor, "the alive record back on a new lease", func() (bool, string) {
		resp, err := x.cli.Get(t.Context(), faultAliveKey)
		return err == nil && len(resp.Kvs) == 1 && clientv3.LeaseID(resp.Kvs[0].Lease) != lease, ""
	})
}

// wantExport fails unless etcd holds want as the export's spec.
func (x faultyExport) wantExport(t *testing.T, want registry.ServiceSpec, after string) {
	t.Helper()
	if got := string(getKey(t, x.cli, faultExportKey).Value); got != mustJSON(t, map[string]any{"spec": want}) {
		t.Errorf("%s, etcd holds %s", after, got)
	}
}

// A Publish whose reply is lost (it landed), then a withdrawal: DeleteExport
// deletes what landed.
func TestWithdrawAfterAPublishWhoseReplyWasLost(t *testing.T) {
	t.Parallel()
	x := startFaulty(t, false)
	cli, a, f, v := x.cli, x.a, x.f, x.v
	exportKey := faultExportKey

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
	x := startFaulty(t, true)
	cli, a, f, v := x.cli, x.a, x.f, x.v
	exportKey := faultExportKey

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
	x := startFaulty(t, true)
	cli, a, f, v := x.cli, x.a, x.f, x.v
	exportKey := faultExportKey

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

// Someone else changes the record right after this backend's write landed
// (a first write, or the retry of a write whose reply was lost), and the
// watch sees it before the write returns: the next put of the same value
// writes it again.
func TestChangeSeenBeforeTheWriteReturnsRepaired(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{false, true} {
		t.Run(fmt.Sprintf("retry=%t", retry), func(t *testing.T) {
			t.Parallel()
			x := startFaulty(t, true)
			if retry {
				x.f.arm(lostAnswer)
				if err := x.a.PutExport(t.Context(), web, spec2); err == nil {
					t.Fatal("PutExport succeeded, want the injected error")
				}
			}
			x.f.arm(x.changeAfterLanding(t))
			must(t, x.a.PutExport(t.Context(), web, spec2))
			must(t, x.a.PutExport(t.Context(), web, spec2))
			x.wantExport(t, spec2, "after PutExport(spec2) returned nil")
		})
	}
}

// A Publish lands, then someone deletes the export, and the watch sees it,
// before the reply comes: the same export put again is written back, not
// skipped as already held.
func TestDeletionSeenBeforeTheWriteReturnsRepaired(t *testing.T) {
	t.Parallel()
	x := startFaulty(t, true)
	x.f.arm(x.deleteAfterLanding(t))
	must(t, x.a.PutExport(t.Context(), web, spec2))
	must(t, x.a.PutExport(t.Context(), web, spec2))
	if !present(t, x.cli, faultExportKey) {
		t.Fatal("the export deleted after its write landed was not written again")
	}
	x.wantExport(t, spec2, "after PutExport(spec2) returned nil")
}

// A write that finds its lease gone repairs it first; while the registry
// does not answer that repair's reads, the write gives up within the
// backend's RequestTimeout, whatever its caller's context (a reconcile's has
// no deadline), rather than hold the write lock through the outage.
func TestLeaseRepairOfAWriteIsBounded(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	f := &fault{}
	a := open(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"}, func(o *etcd.Options) {
		o.DialOptions = append(o.DialOptions, grpc.WithChainUnaryInterceptor(f.interceptor))
		o.RequestTimeout = time.Second
	})
	must(t, a.Publish(t.Context(), web, spec, groups))
	stop := f.hangReads(faultAliveKey)
	defer stop()
	_, err := cli.Revoke(t.Context(), leaseOf(t, cli, faultAliveKey))
	must(t, err)

	// The caller's context ends only when the test gives up.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	giveUp := time.AfterFunc(time.Minute, func() { cancel(errors.New("the test gave up")) })
	defer giveUp.Stop()
	err = a.PutExport(ctx, web, spec2)
	switch {
	case err == nil:
		t.Fatal("PutExport succeeded with its lease gone and the repair's reads unanswered")
	case context.Cause(ctx) != nil:
		t.Fatalf("PutExport held on until its caller's context ended: %v", err)
	}
	stop()
	poll.Until(t, waitFor, "the export written once the registry answers", func() (bool, string) {
		if err := a.PutExport(t.Context(), web, spec2); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	x := faultyExport{cli: cli}
	x.wantExport(t, spec2, "after the registry answered again")
}

// The alive record is deleted; while its repair write is under way (after
// it landed) it is deleted again, and the watch sees that before the write
// returns: it is repaired again.
func TestAliveDeletedDuringItsRepairRepairedAgain(t *testing.T) {
	t.Parallel()
	x := startFaulty(t, true)
	cli, f, v := x.cli, x.f, x.v
	aliveKey := faultAliveKey

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
	x := startFaulty(t, true)
	x.f.arm(lostAnswer)
	if err := x.a.PutExport(t.Context(), web, spec2); err == nil {
		t.Fatal("PutExport succeeded, want the injected error")
	}
	x.loseLease(t)
	x.wantExport(t, spec2, "after the lease's repair")
}

// A withdrawal whose reply is lost (it landed), then a lost lease: its
// repair writes what the backend holds, which no longer has the withdrawn
// records.
func TestWithdrawalWhoseReplyWasLostStaysWithdrawn(t *testing.T) {
	t.Parallel()
	x := startFaulty(t, true)
	x.f.arm(lostAnswer)
	if err := x.a.DeleteExport(t.Context(), web); err == nil {
		t.Fatal("DeleteExport succeeded, want the injected error")
	}
	x.loseLease(t)
	if present(t, x.cli, faultExportKey) {
		t.Error("the lease repair wrote a withdrawn export back")
	}
}

// A Publish of a new export fails and did not land; the export controller
// then withdraws it without a DeleteExport (no reader shows it). A lease
// repair does not write it.
func TestFailedNewPublishNotWrittenByALeaseRepair(t *testing.T) {
	t.Parallel()
	x := startFaulty(t, false)
	x.f.arm(func(func() error) error { return status.Error(codes.Unavailable, "injected: not sent") })
	if err := x.a.Publish(t.Context(), web, spec, groups); err == nil {
		t.Fatal("Publish succeeded, want the injected error")
	}
	if present(t, x.cli, faultExportKey) {
		t.Fatal("the Publish landed")
	}
	x.loseLease(t)
	if present(t, x.cli, faultExportKey) {
		t.Error("the lease repair wrote an export whose Publish never landed")
	}
}

// A failed write, then its retry lands and the record is deleted before the
// retry returns: the next put writes it again.
func TestDeletionDuringTheRetryOfAFailedWriteRepaired(t *testing.T) {
	t.Parallel()
	x := startFaulty(t, true)
	x.f.arm(lostAnswer)
	if err := x.a.PutExport(t.Context(), web, spec2); err == nil {
		t.Fatal("PutExport succeeded, want the injected error")
	}
	x.f.arm(x.deleteAfterLanding(t))
	must(t, x.a.PutExport(t.Context(), web, spec2))
	must(t, x.a.PutExport(t.Context(), web, spec2))
	x.wantExport(t, spec2, "after PutExport(spec2) returned nil")
}

// TestNothingWrittenAfterClose: a put under way when Close is called,
// whose lease turns out gone, neither grants a lease nor writes the
// records again once Close has returned: the put ends with Close, and
// Close waits for it.
func TestNothingWrittenAfterClose(t *testing.T) {
	t.Parallel()
	srv, raw := startWithClient(t)
	// A client of the caller's, which Close leaves open.
	f := &fault{}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(f.interceptor)}})
	must(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	a, err := etcd.NewFromClient(t.Context(), cli, etcd.Options{Identity: registry.Identity{ClusterSet: "set1", Cluster: "a"}, Prefix: prefix})
	must(t, err)
	must(t, a.PutExport(t.Context(), web, spec))
	lease := leaseOf(t, raw, faultAliveKey)
	closed := make(chan error, 1)
	f.armWithContext(func(ctx context.Context, invoke func() error) error {
		_, err := raw.Revoke(t.Context(), lease)
		must(t, err)
		go func() { closed <- a.Close() }()
		// Close ends the put's context; a put that outlives Close
		// goes on after a while.
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		return invoke()
	})
	if err := a.PutExport(t.Context(), web, spec2); err == nil {
		t.Error("a put that Close ended succeeded")
	}
	must(t, <-closed)
	resp, err := raw.Get(t.Context(), prefix+"/set1/clusters/a/", clientv3.WithPrefix())
	must(t, err)
	for _, kv := range resp.Kvs {
		t.Errorf("after Close, etcd holds %s on lease %x", kv.Key, kv.Lease)
	}
}

// TestTwoWritersOfOneClusterStop: two backends given one cluster id (two
// controllers with a copied ClusterProperty), each writing its export again
// when its watch shows the other's, as the export controller does. Instead
// of rewriting each other's without end, a backend refuses the write after
// contendFlaps losses in a row, saying why.
func TestTwoWritersOfOneClusterStop(t *testing.T) {
	t.Parallel()
	srv := startServer(t, filepath.Join(t.TempDir(), "etcd"), "")
	id := registry.Identity{ClusterSet: "set1", Cluster: "a"}
	a1, a2 := open(t, srv.ClientURL(), id), open(t, srv.ClientURL(), id)
	rec1, rec2 := registrytest.StartWatch(t, a1), registrytest.StartWatch(t, a2)
	aID := registry.RecordID{Cluster: "a", Service: web}
	shows := func(rec *registrytest.Recorder, want registry.ServiceSpec) {
		t.Helper()
		rec.WaitFor(t, 30*time.Second, "the writer's export", func(_ registrytest.Event, v *registrytest.View) bool {
			x, ok := v.Exports[aID]
			return ok && cmp.Equal(x.Spec, want)
		})
	}
	var err error
	rounds := 0
	// Each write is waited for in both watches, its writer's first, so
	// that each writer has seen the other's write (and knows its record
	// changed) before it writes again. (A run under a loaded CI machine
	// waited 10 s for one watch to show the other writer's export, and
	// saw only its own: 30 s now, and the wait in the writer's own watch
	// tells which of the two did not come.)
	for ; rounds < 3*10 && err == nil; rounds++ {
		if err = a1.PutExport(t.Context(), web, spec); err != nil {
			break
		}
		shows(rec1, spec)
		shows(rec2, spec)
		if err = a2.PutExport(t.Context(), web, spec2); err != nil {
			break
		}
		shows(rec2, spec2)
		shows(rec1, spec2)
	}
	if err == nil {
		t.Fatalf("two writers of cluster a rewrote each other's export %d times, and go on", 2*rounds)
	}
	if !strings.Contains(err.Error(), `another controller running as cluster "a"`) {
		t.Errorf("the refused write says %q, want it to name the cause", err)
	}
	if rounds > 12 {
		t.Errorf("refused after %d rounds, want about 10", rounds)
	}
}

// The alive record of cluster a is deleted by hand while a's lease lives,
// and another Kubernetes cluster given a's id starts before a's repair of
// the record lands: it finds no alive record, and takes a's records onto
// its lease. a's repair does not write over the other's alive record: a is
// fenced, and its writes and withdrawals are refused, until the other's
// lease has ended; then a takes its id back.
func TestAliveTakenWhileItWasGoneFences(t *testing.T) {
	t.Parallel()
	srv, cli := startWithClient(t)
	id := registry.Identity{ClusterSet: "set1", Cluster: "a", Instance: "uid-first"}
	a, f := openFaultyAs(t, srv.ClientURL(), id)
	v := watchView(t, a)
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")

	// a's repair write waits until the other cluster has started.
	repairing, started := make(chan struct{}), make(chan struct{})
	f.arm(func(invoke func() error) error {
		close(repairing)
		select {
		case <-started:
		case <-t.Context().Done():
		}
		return invoke()
	})
	_, err := cli.Delete(t.Context(), faultAliveKey)
	must(t, err)
	<-repairing
	otherID := id
	otherID.Instance = "uid-other"
	other := open(t, srv.ClientURL(), otherID)
	close(started)
	otherLease := leaseOf(t, cli, faultAliveKey)

	poll.Until(t, waitFor, "a fenced", func() (bool, string) {
		err := a.Fenced()
		return errors.Is(err, registry.ErrClusterIDInUse), fmt.Sprintf("Fenced() = %v", err)
	})
	if err := a.Lapsed(); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("a's Lapsed() = %v, want ErrClusterIDInUse (its exports say why)", err)
	}
	if err := a.PutExport(t.Context(), web, spec2); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("a's put while the id is another's: %v, want ErrClusterIDInUse", err)
	}
	if err := a.DeleteExport(t.Context(), web); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("a's withdrawal while the id is another's: %v, want ErrClusterIDInUse", err)
	}
	if kv := getKey(t, cli, faultAliveKey); clientv3.LeaseID(kv.Lease) != otherLease || !strings.Contains(string(kv.Value), "uid-other") {
		t.Errorf("the alive record: %s on lease %x, want the other cluster's", kv.Value, kv.Lease)
	}
	if kv := getKey(t, cli, faultExportKey); clientv3.LeaseID(kv.Lease) != otherLease {
		t.Errorf("the export on lease %x, want the other cluster's", kv.Lease)
	}

	// The other cluster stops, and its lease ends: a writes its alive
	// record again, and its records once its controller puts them.
	must(t, other.Close())
	_, err = cli.Revoke(t.Context(), otherLease)
	must(t, err)
	poll.Until(t, waitFor, "a's alive record back", func() (bool, string) {
		resp, err := cli.Get(t.Context(), faultAliveKey)
		return err == nil && len(resp.Kvs) == 1 && strings.Contains(string(resp.Kvs[0].Value), "uid-first") && a.Fenced() == nil,
			fmt.Sprintf("Fenced() = %v", a.Fenced())
	})
	if err := a.Lapsed(); err != nil {
		t.Errorf("a's Lapsed() = %v once its id is free again, want nil", err)
	}
	must(t, a.Publish(t.Context(), web, spec, groups))
	waitView(t, v, web, "a,eps:a", "")
}

// aliveTakenAtTheNextWrite opens a backend of cluster a with web published,
// and arms its next write to find, as it is sent, a's alive record deleted
// by hand and another Kubernetes cluster given a's id started, holding a's
// records; other returns that cluster's lease once it has started.
func aliveTakenAtTheNextWrite(t *testing.T) (a *etcd.Backend, cli *clientv3.Client, other func() clientv3.LeaseID) {
	srv, cli := startWithClient(t)
	id := registry.Identity{ClusterSet: "set1", Cluster: "a", Instance: "uid-first"}
	a, f := openFaultyAs(t, srv.ClientURL(), id)
	must(t, a.Publish(t.Context(), web, spec, groups))
	var lease atomic.Int64
	f.arm(func(invoke func() error) error {
		_, err := cli.Delete(t.Context(), faultAliveKey)
		must(t, err)
		otherID := id
		otherID.Instance = "uid-other"
		open(t, srv.ClientURL(), otherID)
		lease.Store(int64(leaseOf(t, cli, faultAliveKey)))
		return invoke()
	})
	return a, cli, func() clientv3.LeaseID { return clientv3.LeaseID(lease.Load()) }
}

// Cluster a withdraws an export just as its alive record was deleted by
// hand and another Kubernetes cluster given a's id took its records: the
// withdrawal, which finds a's lease alive and the alive record another's,
// deletes none of the other's records.
func TestWithdrawalWhileAnotherTookTheAliveRecordDeletesNothing(t *testing.T) {
	t.Parallel()
	a, cli, _ := aliveTakenAtTheNextWrite(t)
	if err := a.DeleteExport(t.Context(), web); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("a's withdrawal with the id another's: %v, want ErrClusterIDInUse", err)
	}
	if !present(t, cli, faultExportKey) {
		t.Error("a's withdrawal deleted the other cluster's export")
	}
}

// Cluster a writes its endpoints just after its alive record was deleted by
// hand and another Kubernetes cluster given a's id took its records, before
// a's watch has told it: the write, which finds the alive record no longer
// under a's lease and another's, writes nothing over the other's record.
func TestPutWhileAnotherTookTheAliveRecordWritesNothing(t *testing.T) {
	t.Parallel()
	a, cli, other := aliveTakenAtTheNextWrite(t)
	moved := []registry.EndpointGroup{{AddressType: "IPv4"}}
	if err := a.PutEndpoints(t.Context(), web, moved); !errors.Is(err, registry.ErrClusterIDInUse) {
		t.Errorf("a's put with the id another's: %v, want ErrClusterIDInUse", err)
	}
	if kv := getKey(t, cli, "/test/set1/clusters/a/endpoints/shop/web"); clientv3.LeaseID(kv.Lease) != other() {
		t.Errorf("the endpoints on lease %x, want the other cluster's %x: a wrote over them", kv.Lease, other())
	}
}

// TestLeaseRepairOfManyRecordsOnASlowRegistry: a lease repair of more
// records than one transaction holds, on a registry whose every write is
// slow, completes, and the records stay: each transaction is bounded on its
// own, and the new lease is renewed while they run.
func TestLeaseRepairOfManyRecordsOnASlowRegistry(t *testing.T) {
	t.Parallel()
	const services = 320 // 640 records and the alive record: 11 transactions
	leaseRepairOnASlowRegistry(t, services, 250*time.Millisecond, time.Second)
}

// TestLeaseRepairWithAWriteSlowerThanTheTTL: one transaction of a lease
// repair that takes longer than the TTL does not lose the new lease.
func TestLeaseRepairWithAWriteSlowerThanTheTTL(t *testing.T) {
	t.Parallel()
	leaseRepairOnASlowRegistry(t, 10, 3*time.Second, 8*time.Second)
}

// leaseRepairOnASlowRegistry publishes services with a TTL of 2 s, makes
// every write wait slow, revokes the lease, and waits for every record on
// a new lease, still there two TTLs later.
func leaseRepairOnASlowRegistry(t *testing.T, services int, slow, requestTimeout time.Duration) {
	t.Helper()
	srv, cli := startWithClient(t)
	a, f := openFaultyAs(t, srv.ClientURL(), registry.Identity{ClusterSet: "set1", Cluster: "a"}, func(o *etcd.Options) {
		o.TTL, o.RequestTimeout = 2*time.Second, requestTimeout
	})
	for i := range services {
		must(t, a.Publish(t.Context(), registry.ServiceKey{Namespace: "shop", Name: fmt.Sprintf("web-%d", i)}, spec, groups))
	}
	f.slowWrites(slow)
	lease := leaseOf(t, cli, faultAliveKey)
	_, err := cli.Revoke(t.Context(), lease)
	must(t, err)

	onLease := func() (clientv3.LeaseID, int) {
		resp, err := cli.Get(t.Context(), "/test/set1/clusters/a/", clientv3.WithPrefix())
		must(t, err)
		var alive clientv3.LeaseID
		for _, kv := range resp.Kvs {
			if string(kv.Key) == faultAliveKey {
				alive = clientv3.LeaseID(kv.Lease)
			}
		}
		n := 0
		for _, kv := range resp.Kvs {
			if alive != clientv3.NoLease && clientv3.LeaseID(kv.Lease) == alive {
				n++
			}
		}
		return alive, n
	}
	var repaired clientv3.LeaseID
	poll.Until(t, 30*time.Second, "every record on a new lease", func() (bool, string) {
		l, n := onLease()
		repaired = l
		return l != lease && n == 2*services+1, fmt.Sprintf("%d records on the alive record's lease", n)
	})
	// Two TTLs later they are all still there, on that lease.
	f.slowWrites(0)
	until := time.Now().Add(4 * time.Second)
	poll.Until(t, 10*time.Second, "two TTLs with every record", func() (bool, string) {
		if l, n := onLease(); l != repaired || n != 2*services+1 {
			t.Fatalf("%d records on lease %x after the repair, want %d on %x", n, l, 2*services+1, repaired)
		}
		return time.Now().After(until), "waiting"
	})
}
