package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestUnanswered(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("put: %w", context.DeadlineExceeded), true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrTimeoutDueToConnectionLost, true},
		{rpctypes.ErrPermissionDenied, false},
		{rpctypes.ErrLeaseNotFound, false},
		{errors.New("something else"), false},
	} {
		if got := unanswered(tc.err); got != tc.want {
			t.Errorf("unanswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Each member's turn: a request that gets no answer is tried once per
// endpoint, every try but the last within its share of RequestTimeout, the
// last within the caller's context; an answer ends it.
func TestEachMember(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, DialTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	c := &conn{cli: cli, opts: Options{RequestTimeout: 6 * time.Second}}
	var deadlines []time.Duration
	try := func(results ...error) (int, error) {
		n := 0
		err := c.eachMember(context.Background(), func(ctx context.Context) error {
			if d, ok := ctx.Deadline(); ok {
				deadlines = append(deadlines, time.Until(d))
			}
			n++
			return results[n-1]
		})
		return n, err
	}
	if n, err := try(rpctypes.ErrTimeout, nil); n != 2 || err != nil {
		t.Errorf("timeout then success: %d tries, %v", n, err)
	}
	if len(deadlines) != 2 {
		t.Errorf("%d tries had a deadline, want both (neither was the last)", len(deadlines))
	}
	for _, d := range deadlines {
		if d > 2*time.Second {
			t.Errorf("a try had %s, want at most a third of RequestTimeout", d)
		}
	}
	deadlines = nil
	if n, err := try(rpctypes.ErrNoLeader, rpctypes.ErrNoLeader, rpctypes.ErrNoLeader); n != 3 || !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Errorf("no leader thrice: %d tries, %v", n, err)
	}
	if len(deadlines) != 3 || deadlines[2] > 6*time.Second || deadlines[2] < 5*time.Second {
		t.Errorf("deadlines %v, want 3: the last, its context having none, RequestTimeout", deadlines)
	}
	// A context with a deadline bounds the last try alone.
	deadlines = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_ = c.eachMember(ctx, func(ctx context.Context) error {
		d, _ := ctx.Deadline()
		deadlines = append(deadlines, time.Until(d))
		return rpctypes.ErrNoLeader
	})
	if len(deadlines) != 3 || deadlines[2] < 59*time.Minute {
		t.Errorf("deadlines %v, want 3: the last the context's", deadlines)
	}
	if n, err := try(rpctypes.ErrPermissionDenied); n != 1 || !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("permission denied: %d tries, %v", n, err)
	}
}
