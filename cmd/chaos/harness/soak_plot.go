package harness

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// soakPlot is what the soak's picture shows: RSS and goroutines of every
// serve process over time, the projection lag, with the measurement burst
// and the fault windows shaded.
type soakPlot struct {
	Title              string
	T0                 time.Time // the open loop's start: minute 0
	Burst              [2]time.Time
	End                time.Time
	Samples            []soakSample
	Windows            []faultWindow
	Names              []string // the serve processes
	Baseline           float64  // goroutines before the first fault (sum)
	MaxGoroutineGrowth float64
	MaxLag             time.Duration
}

var (
	procColors = []color.Color{
		color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255},
		color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255},
	}
	faultColors = map[string]color.RGBA{
		R1: {R: 214, G: 39, B: 40}, R2: {R: 31, G: 119, B: 180}, R5: {R: 188, G: 189, B: 34},
	}
	faultNames = map[string]string{R1: "R1 SIGKILL", R2: "R2 PostgreSQL crash", R5: "R5 open writer transaction"}
)

func withAlpha(c color.RGBA, a uint8) color.Color {
	// Premultiplied, as image/color wants it.
	f := float64(a) / 255
	return color.RGBA{R: uint8(float64(c.R) * f), G: uint8(float64(c.G) * f), B: uint8(float64(c.B) * f), A: a}
}

// band shades [From, To) over the whole height of a plot.
type band struct {
	From, To float64
	Color    color.Color
}

func (b band) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x0, x1 := max(trX(b.From), c.Min.X), min(trX(b.To), c.Max.X)
	if x1 <= x0 {
		return
	}
	c.FillPolygon(b.Color, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
}

// swatch is a legend entry for a band.
type swatch struct{ Color color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.Color, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

func (sp soakPlot) minutes(t time.Time) float64 { return t.Sub(sp.T0).Minutes() }

// shade adds the burst and every fault window to p (before the lines, so
// that they are drawn over it); legend adds their swatches.
func (sp soakPlot) shade(p *plot.Plot, legend bool) {
	grey := withAlpha(color.RGBA{R: 128, G: 128, B: 128}, 50)
	p.Add(band{From: sp.minutes(sp.Burst[0]), To: sp.minutes(sp.Burst[1]), Color: grey})
	seen := map[string]bool{}
	for _, w := range sp.Windows {
		c := faultColors[w.Kind]
		p.Add(band{From: sp.minutes(w.Start), To: sp.minutes(w.End), Color: withAlpha(c, 110)})
		p.Add(band{From: sp.minutes(w.End), To: sp.minutes(w.Settled), Color: withAlpha(c, 40)})
		if legend && !seen[w.Kind] {
			seen[w.Kind] = true
			p.Legend.Add(faultNames[w.Kind], swatch{withAlpha(c, 110)})
		}
	}
	if legend {
		p.Legend.Add("closed-loop burst (maximum)", swatch{grey})
	}
}

func (sp soakPlot) newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.X.Label.Text = "minutes since the open loop started (faults shaded: dark while the fault lasts, light while it settles)"
	p.X.Min = sp.minutes(sp.Burst[0])
	p.X.Max = sp.minutes(sp.End)
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	return p
}

func addLine(p *plot.Plot, pts plotter.XYs, c color.Color, width vg.Length, dashes ...vg.Length) error {
	if len(pts) == 0 {
		return nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = c, width, dashes
	p.Add(l)
	return nil
}

func (sp soakPlot) rssPlot() (*plot.Plot, error) {
	p := sp.newPlot("RSS of each serve process (one line per incarnation: a restart is a new pid)", "RSS (MiB)")
	sp.shade(p, true)
	p.Y.Min = 0
	for _, inc := range incarnations(sp.Samples, nil) {
		var pts plotter.XYs
		for _, s := range inc.Samples {
			pts = append(pts, plotter.XY{X: sp.minutes(s.At), Y: float64(s.Procs[inc.Proc].RSS) / (1 << 20)})
		}
		if err := addLine(p, pts, procColors[inc.Proc%len(procColors)], vg.Points(1.2)); err != nil {
			return nil, err
		}
	}
	for i, n := range sp.Names {
		p.Legend.Add(n, lineThumb(procColors[i%len(procColors)]))
	}
	headroom(p, 1.45)
	return p, nil
}

func lineThumb(c color.Color) plot.Thumbnailer {
	l, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}})
	l.Color, l.Width = c, vg.Points(2)
	return l
}

func (sp soakPlot) goroutinePlot() (*plot.Plot, error) {
	p := sp.newPlot("Goroutines (go_goroutines from each process's /metrics; idle connections from its goroutine profile)", "goroutines")
	sp.shade(p, false)
	p.Y.Min = 0
	for _, inc := range incarnations(sp.Samples, nil) {
		var pts plotter.XYs
		for _, s := range inc.Samples {
			if g := s.Procs[inc.Proc].Goroutines; g >= 0 {
				pts = append(pts, plotter.XY{X: sp.minutes(s.At), Y: g})
			}
		}
		if err := addLine(p, pts, procColors[inc.Proc%len(procColors)], vg.Points(1.2)); err != nil {
			return nil, err
		}
	}
	grey := color.Gray{Y: 150}
	for _, sum := range []struct {
		f     func(soakSample) (float64, bool)
		color color.Color
		name  string
	}{
		{soakSample.allGoroutines, grey, "sum of the processes"},
		{soakSample.goroutines, color.Black, "sum less idle HTTP connections (judged)"},
	} {
		var pts plotter.XYs
		var segments []plotter.XYs
		for _, s := range sp.Samples {
			if g, ok := sum.f(s); ok {
				pts = append(pts, plotter.XY{X: sp.minutes(s.At), Y: g})
			} else if len(pts) > 0 {
				segments, pts = append(segments, pts), nil
			}
		}
		segments = append(segments, pts)
		for _, seg := range segments {
			if err := addLine(p, seg, sum.color, vg.Points(1.2)); err != nil {
				return nil, err
			}
		}
		p.Legend.Add(sum.name, lineThumb(sum.color))
	}
	if sp.Baseline > 0 {
		x0, x1 := sp.minutes(sp.Burst[0]), sp.minutes(sp.End)
		lim := sp.Baseline * (1 + sp.MaxGoroutineGrowth)
		if err := addLine(p, plotter.XYs{{X: x0, Y: sp.Baseline}, {X: x1, Y: sp.Baseline}}, color.Gray{Y: 90}, vg.Points(1), vg.Points(4), vg.Points(3)); err != nil {
			return nil, err
		}
		red := color.RGBA{R: 200, A: 255}
		if err := addLine(p, plotter.XYs{{X: x0, Y: lim}, {X: x1, Y: lim}}, red, vg.Points(1), vg.Points(2), vg.Points(2)); err != nil {
			return nil, err
		}
		p.Legend.Add(fmt.Sprintf("sum: pre-fault baseline %.0f (dashed), limit +%.0f %% (red)", sp.Baseline, 100*sp.MaxGoroutineGrowth), lineThumb(red))
	}
	headroom(p, 1.25)
	return p, nil
}

// lagFloor is where a lag of 0 is drawn on the logarithmic axis.
const lagFloor = 0.001

func (sp soakPlot) lagPlot() (*plot.Plot, error) {
	peak := int64(0)
	for _, s := range sp.Samples {
		peak = max(peak, s.Parked)
	}
	p := sp.newPlot(fmt.Sprintf("Projection lag, worst projection and tenant (/v1/admin/projections); dead letters parked: at most %d", peak), "lag (s, log; 0 drawn at 1 ms)")
	sp.shade(p, false)
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = lagFloor
	top := sp.MaxLag.Seconds() * 2
	var pts plotter.XYs
	var segs []plotter.XYs
	for _, s := range sp.Samples {
		if s.Lag < 0 {
			if len(pts) > 0 {
				segs, pts = append(segs, pts), nil
			}
			continue
		}
		top = max(top, s.Lag)
		pts = append(pts, plotter.XY{X: sp.minutes(s.At), Y: max(s.Lag, lagFloor)})
	}
	segs = append(segs, pts)
	// A decade above the highest value: room for the legend.
	p.Y.Max = math.Pow(10, math.Ceil(math.Log10(top))+1)
	blue := color.RGBA{R: 31, G: 119, B: 180, A: 255}
	for _, seg := range segs {
		if err := addLine(p, seg, blue, vg.Points(1.2)); err != nil {
			return nil, err
		}
	}
	red := color.RGBA{R: 200, A: 255}
	x0, x1 := sp.minutes(sp.Burst[0]), sp.minutes(sp.End)
	if err := addLine(p, plotter.XYs{{X: x0, Y: sp.MaxLag.Seconds()}, {X: x1, Y: sp.MaxLag.Seconds()}}, red, vg.Points(1), vg.Points(2), vg.Points(2)); err != nil {
		return nil, err
	}
	p.Legend.Add("lag", lineThumb(blue))
	p.Legend.Add(fmt.Sprintf("p99 target outside fault windows (%s)", sp.MaxLag), lineThumb(red))
	return p, nil
}

// headroom raises the top of a linear Y axis to f times the data's, so
// that the legend (top left) does not cover the lines.
// (p.Add has already widened the axes to the data.)
func headroom(p *plot.Plot, f float64) {
	if p.Y.Max > 0 {
		p.Y.Max *= f
	}
}

// write renders the three panels, one above the other, as a PNG.
func (sp soakPlot) write(path string) error {
	var rows [][]*plot.Plot
	for _, mk := range []func() (*plot.Plot, error){sp.rssPlot, sp.goroutinePlot, sp.lagPlot} {
		p, err := mk()
		if err != nil {
			return err
		}
		rows = append(rows, []*plot.Plot{p})
	}
	img := vgimg.New(vg.Points(1000), vg.Points(1050))
	dc := draw.New(img)
	head := dc
	head.Min.Y = dc.Max.Y - vg.Points(24)
	dc.Max.Y -= vg.Points(24)
	ts := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: plot.DefaultTextHandler}
	ts.Font.Size = vg.Points(13)
	head.FillText(ts, vg.Point{X: (head.Min.X + head.Max.X) / 2, Y: (head.Min.Y + head.Max.Y) / 2}, sp.Title)
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(14)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// soakSummary is what the docs page of a soak states besides the table.
type soakSummary struct {
	plan    soakPlan
	maxRate float64
	rate    float64
	png     string
}

// writeDocs copies the plot into the docs directory and writes latest.md
// beside it: the run's parameters and its result table.
func (run *soakRun) writeDocs(r *Result, sp soakPlot, runErr error) {
	dir := run.e.cfg.DocsDir
	fail := func(err error) { run.e.logf("R18: writing %s: %v", dir, err) }
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
		return
	}
	name := "soak.png"
	if err := sp.write(filepath.Join(dir, name)); err != nil {
		fail(err)
		return
	}
	var b strings.Builder
	verdict := "PASS"
	if runErr != nil || !r.Passed() {
		verdict = "FAIL"
	}
	sm := run.summary
	fmt.Fprintf(&b, "# The soak (R18): the latest run, SOAK=%s\n\n", run.cfg.Duration)
	fmt.Fprintf(&b, "Written by `make soak` (`cmd/chaos --scenarios R18 --soak %s --docs %s`; docs/chaos.md, R18). Verdict: **%s**.\n\n", run.cfg.Duration, dir, verdict)
	fmt.Fprintf(&b, "- run: %s, seed %d, %d serve processes, %d tenants, %d open orders\n", time.Now().UTC().Format("2006-01-02 15:04 MST"),
		run.e.cfg.Seed, run.cfg.Processes, run.cfg.Tenants, run.cfg.Orders)
	fmt.Fprintf(&b, "- maximum (closed loop, %d clients, %s): %.0f commands/s; the soak ran at %.1f/s (%.0f %%)\n",
		run.cfg.BurstClients, sm.plan.Burst, sm.maxRate, sm.rate, 100*run.cfg.LoadFraction)
	fmt.Fprintf(&b, "- plan: %s\n\n", sm.plan)
	fmt.Fprintf(&b, "![RSS, goroutines and lag over the soak](%s)\n\n", name)
	b.WriteString("| criterion | want | got | result |\n|---|---|---|---|\n")
	if runErr != nil {
		fmt.Fprintf(&b, "| scenario ran to its checks | yes | %s | FAIL |\n", mdCell(runErr.Error()))
	}
	for _, c := range r.Criteria {
		res := "PASS"
		if !c.Pass {
			res = "FAIL"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdCell(c.Name), mdCell(c.Want), mdCell(c.Got), res)
	}
	b.WriteString("\nNotes:\n\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.md"), []byte(b.String()), 0o644); err != nil {
		fail(err)
		return
	}
	run.e.logf("R18: plot and summary written to %s", dir)
}

func mdCell(s string) string { return strings.ReplaceAll(oneLine(s, 400), "|", "\\|") }
