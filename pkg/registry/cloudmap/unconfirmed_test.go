package cloudmap

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	"github.com/aws/smithy-go"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// waitFailingAPI registers instances as Cloud Map does, but fails the wait
// for the operations of those in fail: the registration is made, and its
// outcome never seen (a throttled or timed-out GetOperation).
type waitFailingAPI struct {
	API
	mu   sync.Mutex
	fail map[string]bool // instance ids
	ops  map[string]bool // their registrations' operations
	// lose: instance ids whose registrations are made and their responses
	// lost (a connection reset after the request went through).
	lose map[string]bool
	// answer: instance ids whose registrations are made and answered with
	// the error it returns for the registration's output.
	answer map[string]func(*sd.RegisterInstanceOutput) error
}

func (w *waitFailingAPI) answerWith(instance string, answer func(*sd.RegisterInstanceOutput) error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.answer[instance] = answer
}

func (w *waitFailingAPI) loseResponse(instance string, lose bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lose[instance] = lose
}

func (w *waitFailingAPI) failWait(instance string, fail bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail[instance] = fail
	if !fail {
		clear(w.ops)
	}
}

func (w *waitFailingAPI) RegisterInstance(ctx context.Context, in *sd.RegisterInstanceInput, optFns ...func(*sd.Options)) (*sd.RegisterInstanceOutput, error) {
	out, err := w.API.RegisterInstance(ctx, in, optFns...)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && w.lose[aws.ToString(in.InstanceId)] {
		return nil, errors.New("read: connection reset by peer")
	}
	if answer := w.answer[aws.ToString(in.InstanceId)]; err == nil && answer != nil {
		return nil, answer(out)
	}
	if err == nil && w.fail[aws.ToString(in.InstanceId)] {
		w.ops[aws.ToString(out.OperationId)] = true
	}
	return out, err
}

func (w *waitFailingAPI) GetOperation(ctx context.Context, in *sd.GetOperationInput, optFns ...func(*sd.Options)) (*sd.GetOperationOutput, error) {
	w.mu.Lock()
	failed := w.ops[aws.ToString(in.OperationId)]
	w.mu.Unlock()
	if failed {
		return nil, errors.New("connection reset by peer")
	}
	return w.API.GetOperation(ctx, in, optFns...)
}

func waitFailingBackend(t *testing.T, id registry.Identity) (*Backend, *waitFailingAPI) {
	t.Helper()
	opts := motoOptions(moto(t), id, 30*time.Second)
	client, err := NewClient(t.Context(), opts)
	mustDo(t, err)
	api := &waitFailingAPI{API: client, fail: map[string]bool{}, ops: map[string]bool{}, lose: map[string]bool{}, answer: map[string]func(*sd.RegisterInstanceOutput) error{}}
	newFn := func(ctx context.Context, opts Options) (*Backend, error) { return NewFromAPI(ctx, api, opts) }
	return openClosed(t, newFn, opts), api
}

// unconfirmedEndpoint puts the endpoints 10.0.0.1 and 10.0.0.3 of a new
// export with fault on (failWait or loseResponse) for the instance of
// 10.0.0.3, made but not confirmed, so the put fails. It returns the
// backend, the export's key and that instance's id.
func unconfirmedEndpoint(t *testing.T, c *sd.Client, fault func(api *waitFailingAPI, instance string, on bool)) (*Backend, registry.ServiceKey, string) {
	t.Helper()
	id := registry.Identity{ClusterSet: randName("unconfirmed"), Cluster: "east"}
	b, api := waitFailingBackend(t, id)
	key := randWebKey()
	putWeb(t, b, key, "10.0.0.1")
	gone := endpointInstanceID(ownerPrefix(id), "10.0.0.3", &webGroups("x")[0].Ports[0], false)
	fault(api, gone, true)
	if err := b.PutEndpoints(t.Context(), key, webGroups("10.0.0.1", "10.0.0.3")); err == nil {
		t.Fatal("the put whose outcome was not seen succeeded")
	}
	fault(api, gone, false)
	if _, ok := rawInstances(t, c, key.Namespace, key.Name)[gone]; !ok {
		t.Fatal("the registration whose outcome was not seen was not made")
	}
	return b, key, gone
}

// TestUnconfirmedEndpointWithdrawn: an endpoint's registration was made,
// but its wait failed, so the put failed. When the endpoint goes, its
// instance is deregistered, and so on the export's withdrawal: it was
// held as maybe registered, not forgotten.
func TestUnconfirmedEndpointWithdrawn(t *testing.T) {
	c := rawClient(t, moto(t))
	b, key, gone := unconfirmedEndpoint(t, c, (*waitFailingAPI).failWait)
	mustDo(t, b.PutEndpoints(t.Context(), key, webGroups("10.0.0.1")))
	if _, ok := rawInstances(t, c, key.Namespace, key.Name)[gone]; ok {
		t.Errorf("instance %s of an endpoint gone is still registered", gone)
	}

	b, key, _ = unconfirmedEndpoint(t, c, (*waitFailingAPI).failWait)
	mustDo(t, b.DeleteExport(t.Context(), key))
	if left := rawInstances(t, c, key.Namespace, key.Name); len(left) != 0 {
		t.Errorf("after the export's withdrawal, instances left: %v", left)
	}
}

// TestUnconfirmedRecordWithdrawn: a new export's service record was
// registered, but its wait failed. The export's withdrawal deregisters it.
func TestUnconfirmedRecordWithdrawn(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	id := registry.Identity{ClusterSet: randName("unconfirmed"), Cluster: "east"}
	b, api := waitFailingBackend(t, id)
	key := randWebKey()
	rec := recordID(ownerPrefix(id), key)
	api.failWait(rec, true)
	if err := b.PutExport(t.Context(), key, webSpec); err == nil {
		t.Fatal("the put whose wait failed succeeded")
	}
	api.failWait(rec, false)
	if _, ok := rawInstances(t, c, b.opts.SystemNamespace, recordsService)[rec]; !ok {
		t.Fatal("the registration whose wait failed was not made")
	}
	mustDo(t, b.DeleteExport(t.Context(), key))
	if _, ok := rawInstances(t, c, b.opts.SystemNamespace, recordsService)[rec]; ok {
		t.Errorf("service record %s still registered after the export's withdrawal", rec)
	}
}

// TestLostResponseEndpointWithdrawn: an endpoint's registration was made,
// but its response was lost, so the put failed. When the endpoint goes,
// its instance is deregistered.
func TestLostResponseEndpointWithdrawn(t *testing.T) {
	c := rawClient(t, moto(t))
	b, key, gone := unconfirmedEndpoint(t, c, (*waitFailingAPI).loseResponse)
	mustDo(t, b.PutEndpoints(t.Context(), key, webGroups("10.0.0.1")))
	if _, ok := rawInstances(t, c, key.Namespace, key.Name)[gone]; ok {
		t.Errorf("instance %s of an endpoint gone is still registered", gone)
	}
}

// TestCodedAnswerEndpointWithdrawn: an endpoint's registration was made,
// and the answer the backend got is an error of Cloud Map's, as when the
// SDK's retry of a request whose answer was lost is throttled, fails on
// the server, or is told it duplicates the first. When the endpoint goes,
// its instance is deregistered; a duplicate's operation, once it
// succeeds, confirms the registration.
func TestCodedAnswerEndpointWithdrawn(t *testing.T) {
	c := rawClient(t, moto(t))
	for _, tc := range []struct {
		name   string
		answer func(*sd.RegisterInstanceOutput) error
	}{
		{"throttled", func(*sd.RegisterInstanceOutput) error {
			return &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}
		}},
		{"a server error", func(*sd.RegisterInstanceOutput) error {
			return &smithy.GenericAPIError{Code: "InternalFailure", Message: "internal failure", Fault: smithy.FaultServer}
		}},
		{"a duplicate without its operation", func(*sd.RegisterInstanceOutput) error {
			return &types.DuplicateRequest{Message: aws.String("in progress")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, key, gone := unconfirmedEndpoint(t, c, func(api *waitFailingAPI, instance string, on bool) {
				if on {
					api.answerWith(instance, tc.answer)
				} else {
					api.answerWith(instance, nil)
				}
			})
			mustDo(t, b.PutEndpoints(t.Context(), key, webGroups("10.0.0.1")))
			if _, ok := rawInstances(t, c, key.Namespace, key.Name)[gone]; ok {
				t.Errorf("instance %s of an endpoint gone is still registered", gone)
			}
		})
	}

	t.Run("a duplicate of an operation that succeeded", func(t *testing.T) {
		id := registry.Identity{ClusterSet: randName("duplicate"), Cluster: "east"}
		b, api := waitFailingBackend(t, id)
		key := randWebKey()
		putWeb(t, b, key, "10.0.0.1")
		dup := endpointInstanceID(ownerPrefix(id), "10.0.0.3", &webGroups("x")[0].Ports[0], false)
		api.answerWith(dup, func(out *sd.RegisterInstanceOutput) error {
			return &types.DuplicateRequest{Message: aws.String("in progress"), DuplicateOperationId: out.OperationId}
		})
		mustDo(t, b.PutEndpoints(t.Context(), key, webGroups("10.0.0.1", "10.0.0.3")))
		api.answerWith(dup, nil)
		mustDo(t, b.DeleteExport(t.Context(), key))
		if left := rawInstances(t, c, key.Namespace, key.Name); len(left) != 0 {
			t.Errorf("after the export's withdrawal, instances left: %v", left)
		}
	})
}

// TestUnconfirmedRewriteKeepsOthersAttributes: another tool added an
// attribute of its own to an instance of mcsd's; a rewrite of that instance
// whose wait failed is written again by the next put, with the other
// tool's attribute kept.
func TestUnconfirmedRewriteKeepsOthersAttributes(t *testing.T) {
	srv := moto(t)
	c := rawClient(t, srv)
	ctx := t.Context()
	id := registry.Identity{ClusterSet: randName("unconfirmed"), Cluster: "east"}
	b, _ := waitFailingBackend(t, id)
	key := randWebKey()
	putWeb(t, b, key, "10.0.0.1")
	svcID := b.own[key].svc.ID
	groups := webGroups("10.0.0.1")
	inst := endpointInstanceID(ownerPrefix(id), "10.0.0.1", &groups[0].Ports[0], false)
	at := rawInstances(t, c, key.Namespace, key.Name)[inst]
	at["TEAM_TAG"] = "blue"
	_, err := c.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: aws.String(svcID), InstanceId: aws.String(inst), Attributes: at})
	mustDo(t, err)
	mustDo(t, b.Close())

	b, api := waitFailingBackend(t, id) // restarted: it reads the attribute back
	groups[0].Endpoints[0].Ready = false
	api.failWait(inst, true)
	if err := b.PutEndpoints(ctx, key, groups); err == nil {
		t.Fatal("the put whose wait failed succeeded")
	}
	api.failWait(inst, false)
	mustDo(t, b.PutEndpoints(ctx, key, groups))
	if got := rawInstances(t, c, key.Namespace, key.Name)[inst]; got["TEAM_TAG"] != "blue" || got[attrReady] != "false" {
		t.Errorf("instance after the retry: %v, want READY=false and TEAM_TAG kept", got)
	}
}
