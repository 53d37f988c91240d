package etcdcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/test/testbed"
)

// TestFaults: the cluster elects a new leader when its leader is killed,
// takes the member back on its data, and a partitioned member neither
// answers linearizable reads nor sees writes until it is healed.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-unit) runs nothing that needs the testbed's binaries; make test, which CI runs, runs this")
	}
	ctx := context.Background()
	c := StartT(t)
	cli, err := c.client(c.ClientURLs())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	put := func(k, v string) {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := cli.Put(pctx, k, v); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	put("a", "1")

	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(leader)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	next, err := c.WaitLeader(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("member %d still leads after SIGKILL", leader)
	}
	put("b", "2")
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// Partition a follower: it loses the leader and sees no writes.
	victim := (next + 1) % c.Members()
	c.Partition(victim)
	one, err := c.client([]string{c.ClientURLs()[victim]})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = one.Close() }()
	// A client of the partitioned member would time out writing, as
	// against a real partition; write through the others.
	var majority []string
	for i, u := range c.ClientURLs() {
		if i != victim {
			majority = append(majority, u)
		}
	}
	_ = cli.Close()
	if cli, err = c.client(majority); err != nil {
		t.Fatal(err)
	}
	put("c", "3")
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = one.Get(rctx, "c")
	rcancel()
	if err == nil {
		t.Fatal("a partitioned member answered a linearizable read")
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	resp, err := one.Get(sctx, "c", clientv3.WithSerializable())
	scancel()
	if err == nil && len(resp.Kvs) > 0 {
		t.Fatal("a partitioned member saw a write made during the partition")
	}
	c.Heal(victim)
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	defer gcancel()
	resp, err = one.Get(gctx, "c")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "3" {
		t.Fatalf("healed member reads c = %v, %v", resp, err)
	}
}

// TestStartTriesAgain: a member that cannot start (as when its port was
// taken between the choice and the bind) makes Start try again on new
// ports, and a member that never starts is reported with its log's end.
func TestStartTriesAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-unit) runs nothing that needs the testbed's binaries; make test, which CI runs, runs this")
	}
	ctx := context.Background()
	bins, err := testbed.EnsureBinaries(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	failed := filepath.Join(dir, "failed-once")
	starts := filepath.Join(dir, "starts")
	// The first member started fails as etcd does on a port taken; every
	// later start is the real etcd.
	once := filepath.Join(dir, "etcd-once")
	script := fmt.Sprintf("#!/bin/bash\necho >> %q\nif mkdir %q 2>/dev/null; then echo 'listen tcp: bind: address already in use' >&2; exit 1; fi\nexec %q \"$@\"\n", starts, failed, bins.Etcd)
	if err := os.WriteFile(once, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Config{Binary: once, Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		t.Fatalf("start after a member failed once: %v", err)
	}
	defer c.Close()
	if _, err := os.Stat(failed); err != nil {
		t.Fatalf("the first member did not fail: %v", err)
	}
	// The first try's three starts, one of them failed, then three again.
	if b, err := os.ReadFile(starts); err != nil || len(b) != 6 {
		t.Fatalf("%d member starts (%v), want 6: the first try's and the second's", len(b), err)
	}
	for i := range c.Members() {
		if !c.Running(i) {
			t.Errorf("member %d does not run", i)
		}
	}
	cli, err := c.client(c.ClientURLs())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Put(pctx, "a", "1"); err != nil {
		t.Fatalf("put: %v", err)
	}

	never := filepath.Join(dir, "etcd-never")
	if err := os.WriteFile(never, []byte("#!/bin/bash\necho 'no such thing: member cannot start' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctx, Config{Binary: never, Dir: filepath.Join(dir, "never"), Members: 1})
	if err == nil {
		t.Fatal("a member that never starts: Start succeeded")
	}
	for _, want := range []string{"try 3:", "exited", "exit status 3", "member cannot start"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
