package benchreport

import (
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WritePlots draws the report's plots into dir, the directory docs/benchmarks.md is in.
func WritePlots(dir string, r *Report) error {
	for _, pl := range []struct {
		file, title, y string
		value          func(Result) float64
	}{
		{plotWallFile, "Rollout wall time (median)", "seconds", func(res Result) float64 { return res.Wall.Seconds() }},
		{plotPerPodFile, "Wall time per pod (median)", "milliseconds per pod", func(res Result) float64 { return 1000 * res.Wall.Seconds() / float64(res.Pods) }},
		{plotCPUFile, "Driver CPU time (median)", "CPU seconds", func(res Result) float64 { return res.DriverCPU }},
	} {
		if err := writePlot(filepath.Join(dir, pl.file), pl.title, pl.y, r, pl.value); err != nil {
			return err
		}
	}
	return nil
}

func writePlot(path, title, yLabel string, r *Report, value func(Result) float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "pods"
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	var lines []any
	for _, ap := range approaches {
		var pts plotter.XYs
		for _, n := range r.sizes(EqualLimits) {
			if v := r.spread(EqualLimits, ap.a, n, value); v.n > 0 {
				pts = append(pts, plotter.XY{X: float64(n), Y: v.median})
			}
		}
		if len(pts) > 0 {
			lines = append(lines, string(ap.a), pts)
		}
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
