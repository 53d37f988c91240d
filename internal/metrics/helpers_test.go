package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// registryOf is a registry of c's collectors alone.
func registryOf(c *collectors) *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.all()...)
	return reg
}

// gather returns the families of c's collectors.
func gather(t *testing.T, c *collectors) []*dto.MetricFamily {
	t.Helper()
	fams, err := registryOf(c).Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// histogramSum is the sum of east's propagation observations from source.
func histogramSum(t *testing.T, c *collectors, source string) float64 {
	t.Helper()
	for _, f := range gather(t, c) {
		if f.GetName() != "mcsd_propagation_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels[labelCluster] == "east" && labels[labelSourceCluster] == source {
				return m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0
}
