package export

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/metrics"
	"github.com/mcsd-io/mcsd/pkg/registry"
)

// lapser is a registry.Lapser the test sets.
type lapser struct{ why error }

func (l *lapser) Lapsed() error           { return l.why }
func (l *lapser) Lapses() <-chan struct{} { return nil }

// TestLapsedRecordsSayReady: while the backend says this cluster's records
// may have lapsed in the registry, Ready is Unknown (False when another
// cluster took the id) and nothing is written to the registry; once they
// are live again, the export's changes meanwhile are written and Ready is
// True.
func TestLapsedRecordsSayReady(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	l := &lapser{}
	e.r.Lapses = l
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
	e.syncView()

	l.why = errors.New("this cluster's records may have expired in the registry: its lease was not renewed for its TTL")
	e.mustReconcile()
	if c := assertCondition(t, e.serviceExport(), readyType, metav1.ConditionUnknown, string(mcsv1beta1.ServiceExportReasonPending)); !strings.Contains(c.Message, "expired") {
		t.Errorf("Ready message %q does not say why", c.Message)
	}
	if got := exportState(e.serviceExport().Status.Conditions).Ready; got != metrics.ExportReadyUnknown {
		t.Errorf("counted as %q, want %q", got, metrics.ExportReadyUnknown)
	}

	// A change meanwhile is not written, and written once live again.
	se := e.serviceExport()
	se.Spec.ExportedLabels = map[string]string{"tier": "web"}
	if err := e.c.Update(t.Context(), se); err != nil {
		t.Fatal(err)
	}
	e.mustReconcile()
	if spec, _ := e.reg.export(webKey); spec.ExportedLabels["tier"] != "" {
		t.Errorf("a change written while the records lapsed: %+v", spec)
	}
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionUnknown, string(mcsv1beta1.ServiceExportReasonPending))

	l.why = fmt.Errorf("cluster id taken: %w", registry.ErrClusterIDInUse)
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionFalse, string(mcsv1beta1.ServiceExportReasonFailed))

	l.why = nil
	e.mustReconcile()
	assertCondition(t, e.serviceExport(), readyType, metav1.ConditionTrue, string(mcsv1beta1.ServiceExportReasonExported))
	if spec, _ := e.reg.export(webKey); spec.ExportedLabels["tier"] != "web" {
		t.Errorf("the change made while the records lapsed not written: %+v", spec)
	}
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events %v, want none", ev)
	}
}

// TestLapseRequests: a lapse reconciles every export; its end too, unless
// the View has not read the registry again yet (its return does then).
func TestLapseRequests(t *testing.T) {
	e := newEnv(t, newServiceExport(), newService())
	l := &lapser{}
	e.r.Lapses = l
	e.syncView()
	web := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: svcName}}}

	l.why = fmt.Errorf("%w: its lease was not renewed for its TTL", registry.ErrRecordsLapsed)
	e.view.OnConnection(false, errors.New("etcd: context deadline exceeded"))
	if got := e.r.lapseRequests(t.Context()); !reflect.DeepEqual(got, web) {
		t.Errorf("the lapse: %v, want %v", got, web)
	}
	l.why = nil
	if got := e.r.lapseRequests(t.Context()); got != nil {
		t.Errorf("live again, the View not connected yet: %v, want none", got)
	}
	e.view.OnConnection(true, nil)
	if got := e.r.lapseRequests(t.Context()); !reflect.DeepEqual(got, web) {
		t.Errorf("live again, the View connected: %v, want %v", got, web)
	}
}
