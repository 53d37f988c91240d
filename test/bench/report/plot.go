package report

import (
	"image/color"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// series are the latency samples the plots show, in order.
var series = []struct {
	phase, what, label string
	color              color.RGBA
}{
	{"export", "import", "export → import", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}},
	{"churn", "endpoints", "endpoint change", color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}},
	{"dns", "dns", "export → DNS answer", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}},
}

func (r *Results) plot(dir string) error {
	for _, f := range []func(string) error{r.plotCDF, r.plotHistogram, r.plotScaling, r.plotProgress} {
		if err := f(dir); err != nil {
			return err
		}
	}
	return nil
}

// newPlot is a plot with a title, axis labels and a grid.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	return p
}

// addLine draws pts on p in c, and names it in the legend unless label is
// empty.
func addLine(p *plot.Plot, pts plotter.XYs, c color.Color, label string) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	p.Add(l)
	if label != "" {
		p.Legend.Add(label, l)
	}
	return nil
}

// addSeries draws each of the series that has samples on p, as the line
// pts makes of its latencies (seconds, sorted).
func (r *Results) addSeries(p *plot.Plot, pts func(xs []float64) plotter.XYs) error {
	for _, s := range series {
		xs := Seconds(r.Samples, s.phase, s.what)
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		if err := addLine(p, pts(xs), s.color, s.label); err != nil {
			return err
		}
	}
	return nil
}

// xys is pts as the plotter takes them.
func xys(pts []Point) plotter.XYs {
	out := make(plotter.XYs, len(pts))
	for i, pt := range pts {
		out[i] = plotter.XY{X: pt.X, Y: pt.Y}
	}
	return out
}

func save(p *plot.Plot, dir, name string) error {
	return p.Save(18*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, name))
}

// plotCDF: the share of changes propagated within x milliseconds.
func (r *Results) plotCDF(dir string) error {
	p := newPlot("Propagation latency (CDF)", "milliseconds", "share of changes")
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	if err := r.addSeries(p, cdf); err != nil {
		return err
	}
	return save(p, dir, FileCDF)
}

// cdf is the line of the sorted latencies xs (seconds, at least one): the
// share of them within x milliseconds, from 0 at the fastest.
func cdf(xs []float64) plotter.XYs {
	pts := make(plotter.XYs, 0, len(xs)+1)
	pts = append(pts, plotter.XY{X: xs[0] * 1000, Y: 0})
	for i, x := range xs {
		pts = append(pts, plotter.XY{X: x * 1000, Y: float64(i+1) / float64(len(xs))})
	}
	return pts
}

// plotHistogram: the latency distributions side by side as step outlines
// over shared bins.
func (r *Results) plotHistogram(dir string) error {
	p := newPlot("Propagation latency (histogram)", "milliseconds", "changes")
	p.Legend.Left = false
	p.Legend.Top = true
	var hi float64
	for _, s := range series {
		xs := Seconds(r.Samples, s.phase, s.what)
		if len(xs) > 0 {
			slices.Sort(xs)
			hi = max(hi, Quantile(xs, 0.995)*1000)
		}
	}
	if hi == 0 {
		hi = 1
	}
	const bins = 40
	width := hi / bins
	err := r.addSeries(p, func(xs []float64) plotter.XYs {
		counts := make([]float64, bins)
		for _, x := range xs {
			i := int(x * 1000 / width)
			counts[min(max(i, 0), bins-1)]++ // the slowest 0.5% land in the last bin
		}
		var pts plotter.XYs
		for i, c := range counts {
			pts = append(pts, plotter.XY{X: float64(i) * width, Y: c}, plotter.XY{X: float64(i+1) * width, Y: c})
		}
		return pts
	})
	if err != nil {
		return err
	}
	return save(p, dir, FileHistogram)
}

// plotScaling: time until every import converged against the number of
// services changed at once.
func (r *Results) plotScaling(dir string) error {
	p := newPlot("Convergence time vs number of services", "services exported at once", "seconds until every import converged")
	p.Legend.Top = true
	p.Legend.Left = true
	if len(r.Scaling) > 0 {
		l, s, err := plotter.NewLinePoints(xys(r.Scaling))
		if err != nil {
			return err
		}
		l.Color, s.Color = series[0].color, series[0].color
		p.Add(l, s)
		p.Legend.Add("burst of exports (controllers running)", l, s)
	}
	if cs := r.PhaseByName("coldstart"); cs != nil && cs.Converged > 0 {
		pt, err := plotter.NewScatter(plotter.XYs{{X: float64(r.Params.Services), Y: cs.Converged}})
		if err != nil {
			return err
		}
		pt.Color = series[1].color
		pt.Radius = vg.Points(4)
		p.Add(pt)
		p.Legend.Add("cold start (controllers started)", pt)
	}
	p.X.Min, p.Y.Min = 0, 0
	return save(p, dir, FileScaling)
}

// plotProgress: imports converged over time during the cold start.
func (r *Results) plotProgress(dir string) error {
	p := newPlot("Cold start: imports converged over time", "seconds since the controllers started", "imports converged (all clusters)")
	if len(r.Progress) > 0 {
		if err := addLine(p, xys(r.Progress), series[0].color, ""); err != nil {
			return err
		}
	}
	p.X.Min, p.Y.Min = 0, 0
	return save(p, dir, FileProgress)
}
