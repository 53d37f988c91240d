package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// File names a run writes into its results folder.
const (
	FileJSON      = "results.json"
	FileMarkdown  = "report.md"
	FileSamples   = "samples.csv"
	FileCDF       = "latency-cdf.png"
	FileHistogram = "latency-histogram.png"
	FileScaling   = "convergence-vs-services.png"
	FileProgress  = "coldstart-progress.png"
)

// Results is everything one run measured.
type Results struct {
	Started  time.Time     `json:"started"`
	Finished time.Time     `json:"finished"`
	Machine  Machine       `json:"machine"`
	Params   Params        `json:"params"`
	Phases   []*Phase      `json:"phases"`
	Samples  []Sample      `json:"-"` // samples.csv
	Progress []Point       `json:"coldStartProgress,omitempty"`
	Scaling  []Point       `json:"convergenceVsServices,omitempty"`
	Targets  []TargetCheck `json:"targets"`
	Notes    []string      `json:"notes,omitempty"`
}

// Machine describes where the run ran.
type Machine struct {
	NProc     int    `json:"nproc"`
	MemTotal  uint64 `json:"memTotalBytes"`
	CPUModel  string `json:"cpuModel"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"goVersion"`
	// LoadAvg is /proc/loadavg at the start: other work on the machine.
	LoadAvg string `json:"loadAvgAtStart"`
}

// Params are the run's parameters, as given.
type Params struct {
	Registry      string   `json:"registry"`
	Clusters      int      `json:"clusters"`
	Services      int      `json:"services"`
	Endpoints     int      `json:"endpointsPerService"`
	ExportSamples int      `json:"exportSamples"`
	ExportRate    float64  `json:"exportRatePerSecond"`
	Churn         float64  `json:"churnPerSecond"`
	ChurnFor      string   `json:"churnDuration"`
	DNSSamples    int      `json:"dnsSamples"`
	Steady        string   `json:"steadyDuration"`
	Bursts        []int    `json:"bursts"`
	Phases        []string `json:"phases"`
	ControllerQPS float32  `json:"controllerQPS"`
	ControllerBur int      `json:"controllerBurst"`
	Extra         []string `json:"extra,omitempty"`
}

// Phase is what one phase of the run measured. Resource figures are
// deltas over the phase.
type Phase struct {
	Name     string  `json:"name"`
	Seconds  float64 `json:"seconds"`
	Changes  int     `json:"changes"`
	Describe string  `json:"describe"`
	// Latency distributions by what they time ("import", "endpoints", "dns").
	Latency map[string]Dist `json:"latency,omitempty"`
	// Stages: the time from the start of a change to each step on its way,
	// by step (export and DNS phases).
	Stages map[string]Dist `json:"stages,omitempty"`
	// Converged is the time until every import was converged (cold start,
	// bursts), seconds.
	Converged float64 `json:"convergedSeconds,omitempty"`
	// Controllers: one mcsd process per cluster.
	Controllers map[string]Proc `json:"controllers"`
	// Processes: CPU seconds of the testbed's processes by kind (all
	// clusters), the harness (which also runs the etcd registry), and the
	// whole machine ("machine", busy CPU seconds over all cores).
	Processes map[string]float64 `json:"processCPUSeconds"`
	// APIWrites: writes each controller made to its cluster's API server, by
	// resource.
	APIWrites map[string]map[string]int `json:"apiWrites"`
	// RegistryOps: mcsd_registry_operations_total, by operation, all
	// controllers.
	RegistryOps map[string]float64 `json:"registryOps"`
	// RegistryServer: the registry's own counters (etcd: puts, deletes,
	// txns, ranges, watch events sent, revision; Cloud Map: API calls by
	// operation, counted at a proxy in front of moto).
	RegistryServer map[string]float64 `json:"registryServer"`
	// PerChange are derived figures: per change the phase made.
	PerChange map[string]float64 `json:"perChange,omitempty"`
	// PerMinute are rates over the phase (Cloud Map API calls at steady
	// state, by operation).
	PerMinute map[string]float64 `json:"perMinute,omitempty"`
	// Reconciles are the controllers' reconciles by controller.
	Reconciles map[string]float64 `json:"reconciles,omitempty"`
	// Propagation is the controllers' own mcsd_propagation_seconds over
	// the phase: observations, and mean seconds.
	Propagation map[string]float64 `json:"propagation,omitempty"`
}

// Proc is one controller process's resource use.
type Proc struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	// PeakRSS is VmHWM at the end of the phase: the peak since the process
	// started.
	PeakRSS uint64 `json:"peakRSSBytes"`
	// HeapInuse is the Go heap in use at the end of the phase.
	HeapInuse uint64 `json:"heapInuseBytes"`
}

// Sample is one timed change as seen in one cluster.
type Sample struct {
	Phase   string
	What    string // import, endpoints, dns, unexport
	Service string
	Source  string
	Cluster string
	Seconds float64
}

// Point is one point of a plotted series.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// TargetCheck compares one figure with its target.
type TargetCheck struct {
	What   string  `json:"what"`
	Target string  `json:"target"`
	Value  string  `json:"value"`
	Met    *bool   `json:"met,omitempty"` // nil: not measured in this run
	Raw    float64 `json:"raw"`
	Note   string  `json:"note,omitempty"`
}

// PhaseByName returns the phase called name, or nil.
func (r *Results) PhaseByName(name string) *Phase {
	for _, p := range r.Phases {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Write writes results.json, samples.csv, report.md and the plots into dir.
func (r *Results) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, FileJSON), data, 0o644); err != nil {
		return err
	}
	if err := writeSamples(filepath.Join(dir, FileSamples), r.Samples); err != nil {
		return err
	}
	if err := r.plot(dir); err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, FileMarkdown), []byte(r.Markdown()), 0o644)
}

// Read reads the results.json and samples.csv of dir.
func Read(dir string) (*Results, error) {
	data, err := os.ReadFile(filepath.Join(dir, FileJSON))
	if err != nil {
		return nil, err
	}
	r := &Results{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("parse %s: %w", FileJSON, err)
	}
	if r.Samples, err = readSamples(filepath.Join(dir, FileSamples)); err != nil {
		return nil, fmt.Errorf("parse %s: %w", FileSamples, err)
	}
	return r, nil
}
