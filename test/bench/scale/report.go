package main

import (
	"fmt"
	"image/color"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/mcsd-io/mcsd/test/bench/report"
)

// results are a bench-scale run.
type results struct {
	Config   config         `json:"config"`
	Machine  report.Machine `json:"machine"`
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Runs     []runResult    `json:"runs"`
}

func (r runResult) line() string {
	return fmt.Sprintf("[scale] N=%d: converged %s (writes %s); churn p50 %s p99 %s (floor p50 %s p99 %s); idle %.1f req/member/min; resync %s (%d deletions, %d reports); leave seen %s",
		r.N, r.Converged.Round(time.Millisecond), r.Publish.Round(time.Millisecond), ms(r.P50), ms(r.P99), ms(r.FloorP50), ms(r.FloorP99),
		r.IdlePerMemberPerMinute, r.Resynced.Round(time.Millisecond), r.RestartDeletions, r.RestartReports, r.LeaveSeen.Round(time.Millisecond))
}

func ms(d time.Duration) string { return report.MS(d.Seconds()) }

func (res results) markdown() string {
	var b strings.Builder
	c := res.Config
	fmt.Fprintf(&b, "# bench-scale: the etcd registry under N simulated clusters\n\n")
	fmt.Fprintf(&b, "%s. %d Services, each exported by %s clusters with %d endpoints; churn %.1f endpoint change per member per second for %s; idle counted over %s; lease TTL %s; %d members feed a real clusterset.View. Started %s, took %s.\n\n",
		res.Machine, c.Services, kString(c.K), c.Endpoints, c.ChurnRate, c.Churn, c.Idle, c.TTL, c.Views,
		res.Started.Format(time.RFC3339), res.Finished.Sub(res.Started).Round(time.Second))
	b.WriteString("| N | endpoint records | etcd db | writes (floor) | every member holds every record | churn p50 / p99 / max | etcd put → watch p50 / p99 (floor) | p99 ≤ 2 × floor p99 + 50 ms? | churn CPU (cores, all members) | idle requests per member per minute | registry restart: every member read again | deletions / outage reports during it | leaver seen gone by all (TTL) | records deleted at each other member (leaver's) | RSS, all members |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Runs {
		ok := "yes"
		if r.P99 > 2*r.FloorP99+50*time.Millisecond {
			ok = "**no**"
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s / %s / %s | %s / %s | %s | %.2f | %.1f | %s | %d / %d | %s (%s) | %d (%d) | %s |\n",
			r.N, r.Records, report.Bytes(uint64(r.DBBytes)), r.Publish.Round(time.Millisecond), r.Converged.Round(time.Millisecond),
			ms(r.P50), ms(r.P99), ms(r.Max), ms(r.FloorP50), ms(r.FloorP99), ok, r.ChurnCPU, r.IdlePerMemberPerMinute,
			r.Resynced.Round(time.Millisecond), r.RestartDeletions, r.RestartReports, r.LeaveSeen.Round(time.Millisecond), c.TTL,
			r.LeaveDeletions, r.LeaverRecords*2, report.Bytes(r.RSS))
	}
	b.WriteString("\nThe floor is the registry's own: a raw etcd client's put, timed to its arrival on a raw watch, every 50 ms during the churn. \"Writes\" is how long the members took to write every record: etcd's pace, the floor of the cold start. The 50 ms in the churn target stands for the API write floor of a real cluster, which this registry-only run does not have.\n")
	b.WriteString("\n![scale](scale.png)\n")
	return b.String()
}

func kString(k int) string {
	if k <= 0 {
		return "all"
	}
	return fmt.Sprint(k)
}

// plot draws, against N on log scales, the churn p99 and its floor (ms),
// the cold start (s) and the idle requests per member per minute.
func (res results) plot(path string) error {
	p := plot.New()
	p.Title.Text = "bench-scale: cost against clusterset size"
	p.X.Label.Text = "clusters (N)"
	p.Y.Label.Text = "ms, s, requests per member per minute (log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	lines := []struct {
		label string
		c     color.RGBA
		y     func(runResult) float64
	}{
		{"churn p99, put → every other member (ms)", color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, func(r runResult) float64 { return ms64(r.P99) }},
		{"etcd's own put → watch p99 (ms)", color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}, func(r runResult) float64 { return ms64(r.FloorP99) }},
		{"cold start, every member has all (s)", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, func(r runResult) float64 { return r.Converged.Seconds() }},
		{"idle requests per member per minute", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, func(r runResult) float64 { return r.IdlePerMemberPerMinute }},
	}
	for _, l := range lines {
		var pts plotter.XYs
		for _, r := range res.Runs {
			if y := l.y(r); y > 0 {
				pts = append(pts, plotter.XY{X: float64(r.N), Y: y})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color, points.Color = l.c, l.c
		line.Width = vg.Points(1.5)
		p.Add(line, points)
		p.Legend.Add(l.label, line)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(18*vg.Centimeter, 12*vg.Centimeter, path)
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
