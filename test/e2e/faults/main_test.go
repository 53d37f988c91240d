package faults

import (
	"os"
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, framework.Options{
		Name:        "e2e-faults",
		Clusters:    3,
		TTL:         5 * time.Second,
		NoDataPlane: true,
		// A three-member etcd cluster of real processes, so that members
		// can be killed and cut off (etcd_test.go).
		RegistryMembers: 3,
		// The backend's defaults (5s, 10s) suit its 30s default TTL; scaled
		// to a 5s TTL, a registry outage is reported after about 5s (a
		// failed read is tried again before the report).
		RegistryHealthInterval: time.Second,
		RegistryRequestTimeout: 2 * time.Second,
	}, framework.Keep(&env)))
}
