package skeleton

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// run records the steps a Reconcile ran.
type run struct {
	steps []string
	// fail names the step that returns errStep; done: Finalize ends the
	// reconcile; skip: Fetch finds nothing.
	fail       string
	done, skip bool
}

var errStep = errors.New("step failed")

func (r *run) step(name string) error {
	r.steps = append(r.steps, name)
	if r.fail == name {
		return errStep
	}
	return nil
}

func (r *run) reconcile() (ctrl.Result, error) {
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "svc"}}
	return Reconcile(context.Background(), req, Steps[*run]{
		LogKey: "object",
		Fetch: func(context.Context, ctrl.Request) (*run, bool, error) {
			return r, !r.skip, r.step("fetch")
		},
		Finalize: func(_ context.Context, s *run) (bool, error) { return r.done, s.step("finalize") },
		Compute:  func(_ context.Context, s *run) error { return s.step("compute") },
		Apply:    func(_ context.Context, s *run) error { return s.step("apply") },
		PatchStatus: func(_ context.Context, s *run) (time.Duration, error) {
			return time.Second, s.step("patch")
		},
	})
}

func TestReconcileRunsTheStepsInOrder(t *testing.T) {
	all := []string{"fetch", "finalize", "compute", "apply", "patch"}
	tests := []struct {
		name      string
		run       run
		wantSteps []string
		wantErr   bool
	}{
		{name: "all five", wantSteps: all},
		{name: "nothing fetched", run: run{skip: true}, wantSteps: all[:1]},
		{name: "fetch fails", run: run{fail: "fetch"}, wantSteps: all[:1], wantErr: true},
		{name: "finalize ends it", run: run{done: true}, wantSteps: all[:2]},
		{name: "finalize fails", run: run{fail: "finalize"}, wantSteps: all[:2], wantErr: true},
		{name: "status written when compute fails", run: run{fail: "compute"}, wantSteps: []string{"fetch", "finalize", "compute", "patch"}, wantErr: true},
		{name: "status written when apply fails", run: run{fail: "apply"}, wantSteps: all, wantErr: true},
		{name: "patch fails", run: run{fail: "patch"}, wantSteps: all, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.run
			res, err := r.reconcile()
			if !slices.Equal(r.steps, tt.wantSteps) {
				t.Errorf("steps %v, want %v", r.steps, tt.wantSteps)
			}
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, errStep)) {
				t.Errorf("err %v, want error %v", err, tt.wantErr)
			}
			// A requeue goes with success only: an error is retried with
			// backoff.
			wantAfter := time.Duration(0)
			if slices.Contains(r.steps, "patch") && err == nil {
				wantAfter = time.Second
			}
			if res.RequeueAfter != wantAfter {
				t.Errorf("RequeueAfter %v, want %v", res.RequeueAfter, wantAfter)
			}
		})
	}
}
