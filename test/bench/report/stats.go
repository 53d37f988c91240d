package report

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
)

// Dist summarizes a latency distribution, in seconds.
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Summarize computes the distribution of xs (seconds).
func Summarize(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Dist{
		N:    len(s),
		P50:  Quantile(s, 0.50),
		P90:  Quantile(s, 0.90),
		P99:  Quantile(s, 0.99),
		Max:  s[len(s)-1],
		Mean: sum / float64(len(s)),
	}
}

// Quantile returns the q-quantile of sorted xs by the nearest-rank method:
// the smallest value with at least q of the values at or below it.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Seconds returns the samples' seconds that match phase and what.
func Seconds(samples []Sample, phase, what string) []float64 {
	var out []float64
	for _, s := range samples {
		if s.Phase == phase && s.What == what {
			out = append(out, s.Seconds)
		}
	}
	return out
}

func writeSamples(path string, samples []Sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"phase", "what", "service", "source", "cluster", "seconds"})
	for _, s := range samples {
		_ = w.Write([]string{s.Phase, s.What, s.Service, s.Source, s.Cluster, strconv.FormatFloat(s.Seconds, 'f', 6, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func readSamples(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []Sample
	for i, row := range rows {
		if i == 0 {
			continue // header
		}
		if len(row) != 6 {
			return nil, fmt.Errorf("line %d: %d fields, want 6", i+1, len(row))
		}
		secs, err := strconv.ParseFloat(row[5], 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, Sample{Phase: row[0], What: row[1], Service: row[2], Source: row[3], Cluster: row[4], Seconds: secs})
	}
	return out, nil
}
