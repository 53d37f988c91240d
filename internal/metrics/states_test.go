package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	webKey = types.NamespacedName{Namespace: "shop", Name: "web"}
	apiKey = types.NamespacedName{Namespace: "shop", Name: "api"}
)

func TestExportsFollowSetAndForget(t *testing.T) {
	c := newCollectors()
	e := newExports(c, "east")
	e.Set(webKey, ExportState{Valid: true, Ready: ExportReadyExported, Conflicts: []string{"PortConflict", "TypeConflict"}})
	e.Set(apiKey, ExportState{Valid: false, Ready: ExportReadyPending})
	e.Set(apiKey, ExportState{Valid: false, Ready: ExportReadyPending}) // unchanged: counted once
	assertExports(t, c, exportCounts{conflict: 1, none: 1, exported: 1, pending: 1, invalid: 1, valid: 1})
	for reason, n := range map[string]float64{"PortConflict": 1, "TypeConflict": 1, "IPFamilyConflict": 0} {
		if got := testutil.ToFloat64(c.exportConflicts.WithLabelValues("east", reason)); got != n {
			t.Errorf("conflicts %s = %v, want %v", reason, got, n)
		}
	}

	// web's conflict clears and its registry write fails; api goes.
	e.Set(webKey, ExportState{Valid: true, Ready: ExportReadyFailed})
	e.Forget(apiKey)
	e.Forget(apiKey)
	assertExports(t, c, exportCounts{none: 1, failed: 1, valid: 1})
	// Its records lapse in the registry.
	e.Set(webKey, ExportState{Valid: true, Ready: ExportReadyUnknown})
	assertExports(t, c, exportCounts{none: 1, unknown: 1, valid: 1})
	if got := testutil.ToFloat64(c.exportConflicts.WithLabelValues("east", "PortConflict")); got != 0 {
		t.Errorf("PortConflict = %v after the conflict cleared", got)
	}
}

// exportCounts are the counts of cluster east's mcsd_service_exports
// series, by condition and state.
type exportCounts struct {
	conflict, none            int // Conflict
	exported, failed, pending int // Ready
	unknown                   int
	invalid, valid            int // Valid
}

// assertExports compares c's mcsd_service_exports with want: the HELP and
// TYPE lines and east's eight series, at want's counts, and nothing else.
func assertExports(t *testing.T, c *collectors, want exportCounts) {
	t.Helper()
	text := fmt.Sprintf(`
# HELP mcsd_service_exports ServiceExports of the cluster by the state of each condition: condition Valid (state valid, invalid), Ready (exported, pending, failed, unknown), Conflict (conflict, none). Every ServiceExport counts once per condition.
# TYPE mcsd_service_exports gauge
mcsd_service_exports{cluster="east",condition="Conflict",state="conflict"} %d
mcsd_service_exports{cluster="east",condition="Conflict",state="none"} %d
mcsd_service_exports{cluster="east",condition="Ready",state="exported"} %d
mcsd_service_exports{cluster="east",condition="Ready",state="failed"} %d
mcsd_service_exports{cluster="east",condition="Ready",state="pending"} %d
mcsd_service_exports{cluster="east",condition="Ready",state="unknown"} %d
mcsd_service_exports{cluster="east",condition="Valid",state="invalid"} %d
mcsd_service_exports{cluster="east",condition="Valid",state="valid"} %d
`, want.conflict, want.none, want.exported, want.failed, want.pending, want.unknown, want.invalid, want.valid)
	if err := testutil.CollectAndCompare(c.exports, strings.NewReader(text)); err != nil {
		t.Error(err)
	}
}

func TestImportsOfTwoControllersOfOneCluster(t *testing.T) {
	c := newCollectors()
	old := newImports(c, "east")
	old.Set(webKey, ImportReady)
	old.Set(apiKey, ImportPending)
	// A successor starts before the old one has closed: their counts add up
	// and the old one's go when it closes, whatever it is told afterwards.
	next := newImports(c, "east")
	next.Set(webKey, ImportRegistryUnreachable)
	other := newImports(c, "west")
	other.Set(webKey, ImportReady)

	if got := testutil.ToFloat64(c.imports.WithLabelValues("east", string(ImportReady))); got != 1 {
		t.Errorf("east ready = %v, want 1", got)
	}
	old.Close()
	old.Set(webKey, ImportPending)
	old.Forget(apiKey)
	want := `
# HELP mcsd_service_imports ServiceImports mcsd manages in the cluster by state: ready, pending, ipfamily-not-supported, derived-service-conflict, or registry-unreachable (kept as last seen while the registry cannot be read).
# TYPE mcsd_service_imports gauge
mcsd_service_imports{cluster="east",state="derived-service-conflict"} 0
mcsd_service_imports{cluster="east",state="ipfamily-not-supported"} 0
mcsd_service_imports{cluster="east",state="pending"} 0
mcsd_service_imports{cluster="east",state="ready"} 0
mcsd_service_imports{cluster="east",state="registry-unreachable"} 1
mcsd_service_imports{cluster="west",state="derived-service-conflict"} 0
mcsd_service_imports{cluster="west",state="ipfamily-not-supported"} 0
mcsd_service_imports{cluster="west",state="pending"} 0
mcsd_service_imports{cluster="west",state="ready"} 1
mcsd_service_imports{cluster="west",state="registry-unreachable"} 0
`
	if err := testutil.CollectAndCompare(c.imports, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestNilTrackersCountNothing(t *testing.T) {
	// A live tracker's series, at zero, so that there is a count to keep.
	live := NewExports("nil-trackers")
	defer live.Close()
	before := gatherMCSD(t)
	if !strings.Contains(before, "nil-trackers") {
		t.Fatalf("no series of the live tracker to compare:\n%s", before)
	}
	var e *Exports
	e.Set(webKey, ExportState{Valid: true})
	e.Forget(webKey)
	e.Close()
	var i *Imports
	i.Set(webKey, ImportReady)
	i.Forget(webKey)
	i.Close()
	var p *Propagation
	p.Applied(registryKey, nil)
	p.Forget(registryKey)
	if after := gatherMCSD(t); after != before {
		t.Errorf("nil trackers changed the mcsd series:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// gatherMCSD is every mcsd series of the process's metrics registry, as text.
func gatherMCSD(t *testing.T) string {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "mcsd_") {
			b.WriteString(mf.String())
			b.WriteString("\n")
		}
	}
	return b.String()
}

func TestRegisterTwice(t *testing.T) {
	// Several managers in one process: every constructor registers.
	Register()
	NewExports("register-twice").Close()
	NewExports("register-twice").Close()
	NewImports("register-twice").Close()
	NewPropagation("register-twice")
	Register()
}
