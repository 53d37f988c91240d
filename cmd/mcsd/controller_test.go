package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

// What controller-runtime logs through its package logger reaches the
// controller's log.
func TestControllerRuntimeLogsThroughTheControllersLogger(t *testing.T) {
	var out bytes.Buffer
	newLogger(false, &out)
	ctrllog.Log.WithName("reflector").Info("probe from controller-runtime")
	if !strings.Contains(out.String(), "probe from controller-runtime") {
		t.Errorf("controller-runtime's package logger wrote %q to the controller's log, want the probe", out.String())
	}
}

// TestRegistrySettingsCheckedAtStart: a registry setting the backend would
// refuse when it opens is said at once, before the controller reads its
// cluster's identity (which may not be set yet) or connects anywhere.
func TestRegistrySettingsCheckedAtStart(t *testing.T) {
	const unreachable = "etcd://127.0.0.1:1"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a certificate without its key", []string{"--registry", unreachable, "--registry-cert", "client.crt"}, "certificate and key"},
		{"a lease TTL too short", []string{"--registry", unreachable, "--lease-ttl", "1s"}, "shorter than 2s"},
		{"a Cloud Map heartbeat TTL too short", []string{"--registry", "cloudmap://?region=us-east-1", "--lease-ttl", "500ms"}, "shorter than 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := execute(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("mcsd %s: %v, want an error saying %q\n%s", strings.Join(tc.args, " "), err, tc.want, out)
			}
		})
	}
}

// Without --lease-ttl each backend keeps its own TTL (etcd 30s, Cloud Map
// 60s, whose heartbeat every TTL/3 its idle cost counts on): the flag's
// default is zero, which backends.Settings reads as the backend's default.
func TestLeaseTTLDefaultIsTheBackends(t *testing.T) {
	fl := newControllerCommand().Flags().Lookup("lease-ttl")
	if fl == nil || fl.DefValue != "0s" {
		t.Fatalf("--lease-ttl default %v, want 0s (the backend's)", fl)
	}
	secs := func(d time.Duration) string { return fmt.Sprintf("%gs", d.Seconds()) }
	if !strings.Contains(fl.Usage, "etcd "+secs(etcd.DefaultTTL)) || !strings.Contains(fl.Usage, "Cloud Map "+secs(cloudmap.DefaultTTL)) {
		t.Errorf("--lease-ttl help %q does not give the backends' defaults %s and %s", fl.Usage, etcd.DefaultTTL, cloudmap.DefaultTTL)
	}
}
