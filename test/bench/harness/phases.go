package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/miekg/dns"

	"github.com/mcsd-io/mcsd/test/bench/report"
	"github.com/mcsd-io/mcsd/test/testbed"
)

// expectExported sets, for each Service, that every cluster imports it
// with all its endpoints ready.
func (r *run) expectExported(tag string, idx []int, on startOn) {
	for _, i := range idx {
		name := serviceName(i)
		r.tr.expect(name, expectation{tag: tag, exported: true, source: r.wl.source(i).ID, total: r.opts.Endpoints,
			ready: r.wl.readyCount(name), startOn: on})
	}
}

// coldStart: the clusterset exists (Services, EndpointSlices and
// ServiceExports in place, an empty registry, no imports); every
// controller starts at once. Timed until every cluster imports every
// Service.
func (r *run) coldStart(ctx context.Context) error {
	bg := r.background()
	r.expectExported(PhaseColdStart, bg, startGiven)
	r.logf("exporting %d Services before the controllers start", len(bg))
	if err := r.wl.exportAll(ctx, bg); err != nil {
		return err
	}
	var start time.Time
	ph, err := r.measure(ctx, PhaseColdStart, fmt.Sprintf("%d controllers start on %d exported Services", len(r.ids), len(bg)), func(ph *report.Phase) error {
		start = time.Now()
		r.tr.setStart(names(bg), start)
		if d := r.opts.APIServerProfile; d > 0 {
			wait := r.profileAPIServer(ctx, r.clusters[0], d, r.profilePath("cpu", PhaseColdStart, r.ids[0]+"-apiserver"))
			defer wait()
		}
		if err := r.startControllers(PhaseColdStart); err != nil {
			return err
		}
		if err := r.tr.waitAll(ctx, r.opts.Timeout); err != nil {
			return err
		}
		return r.waitControllersReady(ctx)
	})
	outs := r.tr.outcomes(PhaseColdStart)
	if last := lastDone(outs); !last.IsZero() {
		ph.Converged = last.Sub(start).Seconds()
	}
	ph.Changes = len(bg)
	ph.Latency["import (all clusters)"] = report.Summarize(r.allDone(outs, start))
	r.res.Progress = progress(outs, start)
	return err
}

// allDone is the time to convergence of every (Service, cluster) pair from
// start, seconds.
func (r *run) allDone(outs []outcome, start time.Time) []float64 {
	var xs []float64
	for _, o := range outs {
		for _, d := range o.done {
			xs = append(xs, d.Sub(start).Seconds())
		}
	}
	return xs
}

// progress is the number of converged imports over time since start.
func progress(outs []outcome, start time.Time) []report.Point {
	var ts []float64
	for _, o := range outs {
		for _, d := range o.done {
			ts = append(ts, d.Sub(start).Seconds())
		}
	}
	slices.Sort(ts)
	pts := []report.Point{{X: 0, Y: 0}}
	step := max(len(ts)/500, 1)
	for i := 0; i < len(ts); i += step {
		pts = append(pts, report.Point{X: ts[i], Y: float64(i + 1)})
	}
	if len(ts) > 0 {
		pts = append(pts, report.Point{X: ts[len(ts)-1], Y: float64(len(ts))})
	}
	return pts
}

// preload exports the background Services with the controllers running,
// without measuring: for runs without the cold start phase.
func (r *run) preload(ctx context.Context) error {
	if err := r.startControllers("preload"); err != nil {
		return err
	}
	if err := r.waitControllersReady(ctx); err != nil {
		return err
	}
	bg := r.background()
	r.expectExported("preload", bg, startGiven)
	r.logf("exporting %d Services", len(bg))
	start := time.Now()
	r.tr.setStart(names(bg), start)
	if err := r.wl.exportAll(ctx, bg); err != nil {
		return err
	}
	if err := r.tr.waitAll(ctx, r.opts.Timeout); err != nil {
		return err
	}
	r.logf("%d Services imported everywhere in %s", len(bg), time.Since(start).Round(time.Millisecond))
	for id, p := range r.ctrls {
		_ = p.stopProfile(ctx)
		_ = id
	}
	return nil
}

// exportPhase exports Services one at a time at ExportRate on top of the
// background, and times each until imported in every other cluster.
func (r *run) exportPhase(ctx context.Context) error {
	idx := r.exportSamples()
	ph, err := r.measure(ctx, PhaseExport, fmt.Sprintf("%d more Services exported one by one at %.0f/s", len(idx), r.opts.ExportRate),
		func(ph *report.Phase) error {
			if d := r.opts.APIServerProfileExport; d > 0 {
				wait := r.profileAPIServer(ctx, r.clusters[0], d, r.profilePath("cpu", PhaseExport, r.ids[0]+"-apiserver"))
				defer wait()
			}
			if err := r.paced(ctx, idx, r.opts.ExportRate, func(i int) error {
				r.expectExported(PhaseExport, []int{i}, startExport)
				return r.wl.export(ctx, i)
			}); err != nil {
				return err
			}
			return r.tr.waitAll(ctx, r.opts.Timeout)
		})
	ph.Changes = len(idx)
	outs := r.tr.outcomes(PhaseExport)
	ph.Latency["import"] = report.Summarize(r.samples(PhaseExport, "import", outs))
	ph.Stages = r.stages(outs)
	return err
}

// paced calls do for each index, rate a second.
func (r *run) paced(ctx context.Context, idx []int, rate float64, do func(int) error) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for n, i := range idx {
		if n > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := do(i); err != nil {
			return err
		}
	}
	return nil
}

// churnPhase flips the readiness of one endpoint of a random background
// Service, Churn times a second, and times each change until every other
// cluster's slices show it.
func (r *run) churnPhase(ctx context.Context) error {
	bg := r.background()
	var changed []string
	ph, err := r.measure(ctx, PhaseChurn, fmt.Sprintf("endpoint readiness flips at %.1f/s for %s", r.opts.Churn, r.opts.ChurnFor),
		func(ph *report.Phase) error {
			n := int(r.opts.Churn * r.opts.ChurnFor.Seconds())
			rng := rand.New(rand.NewPCG(1, 2))
			picks := make([]int, 0, n)
			for range n {
				picks = append(picks, bg[rng.IntN(len(bg))])
			}
			if err := r.paced(ctx, picks, r.opts.Churn, func(i int) error {
				name := serviceName(i)
				if r.tr.isPending(name) {
					// Its last change has not arrived everywhere yet: take another.
					for _, j := range bg {
						if !r.tr.isPending(serviceName(j)) {
							i, name = j, serviceName(j)
							break
						}
					}
				}
				r.tr.expect(name, expectation{tag: PhaseChurn, exported: true, source: r.wl.source(i).ID, total: r.opts.Endpoints,
					ready: r.wl.readyAfterToggle(name, 0), startOn: startReady})
				if _, err := r.wl.toggle(ctx, i, 0); err != nil {
					return err
				}
				changed = append(changed, name)
				return nil
			}); err != nil {
				return err
			}
			return r.tr.waitAll(ctx, r.opts.Timeout)
		})
	ph.Changes = len(changed)
	ph.Latency["endpoints"] = report.Summarize(r.samples(PhaseChurn, "endpoints", r.tr.outcomes(PhaseChurn)))
	return err
}

// dnsPhase exports Services one at a time and asks the CoreDNS of another
// cluster for the Service's clusterset.local name every few milliseconds
// until it answers with the import's cluster IP.
func (r *run) dnsPhase(ctx context.Context) error {
	idx := r.dnsSamples()
	servers := map[string]*testbed.CoreDNS{}
	defer func() {
		for _, d := range servers {
			_ = d.Close()
		}
	}()
	for _, c := range r.clusters {
		d, err := c.StartCoreDNS(ctx)
		if err != nil {
			return err
		}
		servers[c.ID] = d
	}
	var dnsTimes []float64
	var wrong int
	ph, err := r.measure(ctx, PhaseDNS, fmt.Sprintf("%d more Services exported one at a time, resolved through another cluster's CoreDNS", len(idx)),
		func(ph *report.Phase) error {
			for _, i := range idx {
				name := serviceName(i)
				src := r.wl.source(i)
				query := r.clusters[(src.Index)%len(r.clusters)] // the next cluster
				r.expectExported(PhaseDNS, []int{i}, startExport)
				if err := r.wl.export(ctx, i); err != nil {
					return err
				}
				answered, ip, err := firstAnswer(ctx, servers[query.ID].Addr(), name+"."+namespace+".svc.clusterset.local", r.opts.Timeout)
				if err != nil {
					return err
				}
				if err := r.tr.waitOne(ctx, name, r.opts.Timeout); err != nil {
					return err
				}
				outs := r.tr.outcomes(PhaseDNS)
				o := outs[len(outs)-1]
				if want := r.tr.importIP(query.ID, name); ip != want {
					wrong++
					r.logf("%s: %s answered %s, the import's IP is %s", name, query.ID, ip, want)
				}
				secs := max(answered.Sub(o.start).Seconds(), 0)
				dnsTimes = append(dnsTimes, secs)
				r.res.Samples = append(r.res.Samples, report.Sample{Phase: PhaseDNS, What: "dns", Service: name, Source: src.ID, Cluster: query.ID, Seconds: secs})
			}
			return nil
		})
	ph.Changes = len(idx)
	ph.Latency["dns"] = report.Summarize(dnsTimes)
	outs := r.tr.outcomes(PhaseDNS)
	ph.Latency["import"] = report.Summarize(r.samples(PhaseDNS, "import", outs))
	ph.Stages = r.stages(outs)
	if wrong > 0 {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("DNS: %d of %d first answers were not the import's cluster IP.", wrong, len(idx)))
	}
	return err
}

// firstAnswer asks server for name's A record every 5ms until it answers
// with an address, and returns when it did and the address.
func firstAnswer(ctx context.Context, server, name string, timeout time.Duration) (time.Time, string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		m, err := testbed.Query(ctx, server, name, dns.TypeA)
		at := time.Now()
		if err == nil && m.Rcode == dns.RcodeSuccess {
			for _, rr := range m.Answer {
				if a, ok := rr.(*dns.A); ok {
					return at, a.A.String(), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, "", ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return time.Time{}, "", fmt.Errorf("no DNS answer for %s from %s within %s", name, server, timeout)
}

// steadyPhase watches the idle clusterset: nothing changes, so every write
// is a write of an unchanged object.
func (r *run) steadyPhase(ctx context.Context) error {
	ph, err := r.measure(ctx, PhaseSteady, fmt.Sprintf("nothing changes for %s", r.opts.Steady), func(*report.Phase) error {
		select {
		case <-time.After(r.opts.Steady):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	minutes := ph.Seconds / 60
	ph.PerMinute = map[string]float64{}
	for k, v := range ph.RegistryServer {
		ph.PerMinute["registry server: "+k] = v / minutes
	}
	for k, v := range ph.RegistryOps {
		if v != 0 {
			ph.PerMinute["mcsd registry calls: "+k] = v / minutes
		}
	}
	return err
}

// restartPhase stops every controller and starts them again on the
// converged clusterset: the time until they are ready, and the writes they
// make (none are needed).
func (r *run) restartPhase(ctx context.Context) error {
	r.stopControllers()
	var ready time.Duration
	const settle = 10 * time.Second
	ph, err := r.measure(ctx, PhaseRestart, fmt.Sprintf("every controller restarts on the converged clusterset; watched until %s after ready", settle),
		func(*report.Phase) error {
			start := time.Now()
			if err := r.startControllers(PhaseRestart); err != nil {
				return err
			}
			if err := r.waitControllersReady(ctx); err != nil {
				return err
			}
			ready = time.Since(start)
			time.Sleep(settle)
			return nil
		})
	ph.Converged = ready.Seconds()
	ph.Latency = nil
	return err
}

// burstPhase unexports a number of background Services at once, waits for
// their imports to go, exports them all again at once, and times until
// every cluster imports every one of them; for each burst size.
func (r *run) burstPhase(ctx context.Context) error {
	bg := r.background()
	for _, size := range r.opts.Bursts {
		idx := bg[:size]
		for _, i := range idx {
			r.tr.expect(serviceName(i), expectation{tag: fmt.Sprintf("unexport-%d", size), exported: false, source: r.wl.source(i).ID, startOn: startUnexport})
		}
		if err := r.wl.unexportAll(ctx, idx); err != nil {
			return err
		}
		if err := r.tr.waitAll(ctx, r.opts.Timeout); err != nil {
			return fmt.Errorf("unexport %d: %w", size, err)
		}
		name := fmt.Sprintf("%s-%d", PhaseBurst, size)
		var start time.Time
		ph, err := r.measure(ctx, name, fmt.Sprintf("%d Services exported at once", size), func(*report.Phase) error {
			r.expectExported(name, idx, startGiven)
			start = time.Now()
			r.tr.setStart(names(idx), start)
			if err := r.wl.exportAll(ctx, idx); err != nil {
				return err
			}
			return r.tr.waitAll(ctx, r.opts.Timeout)
		})
		outs := r.tr.outcomes(name)
		ph.Changes = size
		if last := lastDone(outs); !last.IsZero() {
			ph.Converged = last.Sub(start).Seconds()
		}
		ph.Latency["import"] = report.Summarize(r.samples(name, "import", outs))
		r.res.Scaling = append(r.res.Scaling, report.Point{X: float64(size), Y: ph.Converged})
		if err != nil {
			return err
		}
	}
	return nil
}
