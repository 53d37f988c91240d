package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// zoneLogged finds kube-proxy's line for its node's zone, only in the lines
// of the current start (after from), and not for labels without a zone.
func TestZoneLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kube-proxy.log")
	if ok, err := zoneLogged(path, 0); ok || err != nil {
		t.Fatalf("no log yet: %v, %v; want false, nil", ok, err)
	}
	earlier := `I1129 00:33:20.219659   22343 proxier.go:849] "Updated proxier node topology labels" ipFamily="IPv4" labels={"topology.kubernetes.io/zone":"zone-a"}` + "\n"
	noZone := `I1129 00:34:20.219659   22344 proxier.go:849] "Updated proxier node topology labels" ipFamily="IPv4" labels={}` + "\n"
	other := `I1129 00:34:21.178829   22344 proxier.go:1138] "Syncing nftables rules" ipFamily="IPv4" fullSync=false` + "\n"
	if err := os.WriteFile(path, []byte(earlier+noZone+other), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := zoneLogged(path, 0); !ok || err != nil {
		t.Fatalf("whole log: %v, %v; want true, nil", ok, err)
	}
	from := int64(len(earlier))
	if ok, err := zoneLogged(path, from); ok || err != nil {
		t.Fatalf("the current start's lines, without a zone: %v, %v; want false, nil", ok, err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`I1129 00:34:21.2   22344 proxier.go:849] "Updated proxier node topology labels" ipFamily="IPv6" labels={"topology.kubernetes.io/zone":"zone-a"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if ok, err := zoneLogged(path, from); !ok || err != nil {
		t.Fatalf("the current start's lines, with a zone: %v, %v; want true, nil", ok, err)
	}
}
