package main

import (
	"bytes"
	"strings"
	"testing"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
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
