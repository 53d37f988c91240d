package cloudmap

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// pendingAPI answers GetOperation with PENDING a number of times, then
// SUCCESS.
type pendingAPI struct {
	API
	pending int32
	calls   atomic.Int32
}

func (p *pendingAPI) GetOperation(_ context.Context, in *sd.GetOperationInput, _ ...func(*sd.Options)) (*sd.GetOperationOutput, error) {
	status := types.OperationStatusPending
	if p.calls.Add(1) > p.pending {
		status = types.OperationStatusSuccess
	}
	return &sd.GetOperationOutput{Operation: &types.Operation{Id: in.OperationId, Status: status,
		Targets: map[string]string{"INSTANCE": "i"}, UpdateDate: aws.Time(time.Now())}}, nil
}

// TestWaitOperationPastTheBackoffCap: an operation still pending after the
// poll interval reached its cap (2 s) is waited for until OperationTimeout,
// not given up on.
func TestWaitOperationPastTheBackoffCap(t *testing.T) {
	api := &pendingAPI{pending: 8} // 50+100+...+1600 ms, then 2 s twice: ~7 s
	opts := Options{Identity: registry.Identity{ClusterSet: "s", Cluster: "c"}, OperationTimeout: time.Minute}
	opts.Default()
	r, cancel := newReader(context.Background(), api, opts)
	defer cancel()
	b := &Backend{reader: r}
	targets, err := b.waitOperation(t.Context(), "op-1")
	if err != nil || targets["INSTANCE"] != "i" {
		t.Fatalf("waitOperation = %v, %v after %d polls; want the targets", targets, err, api.calls.Load())
	}
	if n := api.calls.Load(); n != 9 {
		t.Errorf("%d GetOperation calls, want 9", n)
	}
}
