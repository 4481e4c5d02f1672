package simnet

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// SVG geometry.
const (
	svgW       = 960
	svgH       = 560
	svgLeft    = 70
	svgRight   = 70
	panelH     = 190
	panel1Top  = 60
	panel2Top  = panel1Top + panelH + 70
	svgPlotW   = svgW - svgLeft - svgRight
	latFloorMS = 0.01
)

// WriteSVG draws the timeline: recall and stale rate per bucket (top, with
// the live node count), lookup latency p50 and p95 on a log scale (bottom),
// and the network events as vertical marks across both panels.
func (r *Report) WriteSVG(w io.Writer) error {
	var b bytes.Buffer
	dur := r.Scenario.DurationS
	if dur <= 0 {
		dur = 1
	}
	x := func(t float64) float64 { return svgLeft + svgPlotW*math.Min(math.Max(t/dur, 0), 1) }
	width := 1.0
	if len(r.Timeline) > 0 {
		if len(r.Timeline) > 1 {
			width = r.Timeline[1].StartS - r.Timeline[0].StartS
		} else {
			width = dur
		}
	}
	mid := func(bk Bucket) float64 { return math.Min(bk.StartS+width/2, dur) }

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	s := r.Scenario
	title := fmt.Sprintf("agentd simnet: %s, %d nodes, %s, seed %d — recall %.2f%%, stale %.2f%%", s.Kind, s.Nodes, secs(s.DurationS), s.Seed, 100*r.Queries.Recall, 100*r.Queries.StaleRate)
	text(&b, svgLeft, 24, "start", 15, title)
	text(&b, svgLeft, 42, "start", 11, fmt.Sprintf("links %gms ± %gms; %g queries/s; buckets of %gs", s.LatencyMS, s.JitterMS, s.QueryRate, width))

	// Partition bands, then event lines, under the data.
	var partStart = -1.0
	for _, m := range r.Marks {
		switch m.Kind {
		case EventPartition:
			partStart = m.AtS
		case EventHeal:
			if partStart >= 0 {
				band(&b, x(partStart), x(m.AtS))
				partStart = -1
			}
		}
	}
	if partStart >= 0 {
		band(&b, x(partStart), x(dur))
	}
	for _, m := range r.Marks {
		color := map[EventKind]string{EventChurn: "#999999", EventPartition: "#e08000", EventHeal: "#e08000", EventMassJoin: "#2a9d3a"}[m.Kind]
		if color == "" {
			color = "#999999"
		}
		for _, top := range []int{panel1Top, panel2Top} {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="3,3"><title>%s</title></line>`+"\n",
				x(m.AtS), top, x(m.AtS), top+panelH, color, esc(fmt.Sprintf("%s at %s %s", m.Kind, secs(m.AtS), m.Detail)))
		}
	}

	// Panel 1: recall and stale rate (%), live nodes (right axis).
	lo := 100.0
	for _, bk := range r.Timeline {
		if bk.Recall != nil {
			lo = math.Min(lo, 100**bk.Recall)
		}
	}
	lo = math.Max(0, math.Floor((lo-1)/5)*5)
	if lo > 90 {
		lo = 90
	}
	y1 := func(p float64) float64 { return panel1Top + panelH*(1-(p-lo)/(100-lo)) }
	frame(&b, panel1Top)
	for _, p := range ticks(lo, 100, 5) {
		gridY(&b, y1(p), fmt.Sprintf("%g%%", p))
	}
	maxLive := 1
	for _, bk := range r.Timeline {
		maxLive = max(maxLive, bk.Live)
	}
	yl := func(n int) float64 { return panel1Top + panelH*(1-float64(n)/float64(maxLive)/1.1) }
	text(&b, svgW-svgRight+8, panel1Top+10, "start", 11, fmt.Sprintf("%d", maxLive))
	text(&b, svgW-svgRight+8, panel1Top+24, "start", 11, "nodes")
	var live, rec, stale []string
	for _, bk := range r.Timeline {
		if bk.Live > 0 {
			live = append(live, fmt.Sprintf("%.1f,%.1f", x(mid(bk)), yl(bk.Live)))
		}
		if bk.Recall != nil {
			rec = append(rec, fmt.Sprintf("%.1f,%.1f", x(mid(bk)), y1(100**bk.Recall)))
		}
		if bk.Stale != nil {
			stale = append(stale, fmt.Sprintf("%.1f,%.1f", x(mid(bk)), y1(math.Max(lo, 100-100**bk.Stale))))
		}
	}
	polyline(&b, live, "#bbbbbb", "live nodes (right axis)")
	polyline(&b, stale, "#d62728", "100% − stale rate")
	polyline(&b, rec, "#1f77b4", "recall")
	legend(&b, panel1Top, []string{"#1f77b4", "recall"}, []string{"#d62728", "100% − stale rate"}, []string{"#bbbbbb", "live nodes"})

	// Panel 2: latency, log scale.
	hi := 1.0
	for _, bk := range r.Timeline {
		hi = math.Max(hi, bk.P95MS)
	}
	decHi := math.Ceil(math.Log10(hi))
	decLo := math.Log10(latFloorMS)
	y2 := func(ms float64) float64 {
		v := math.Log10(math.Max(ms, latFloorMS))
		return panel2Top + panelH*(1-(v-decLo)/(decHi-decLo))
	}
	frame(&b, panel2Top)
	for d := decLo; d <= decHi+1e-9; d++ {
		gridY(&b, y2(math.Pow(10, d)), fmtMS(math.Pow(10, d)))
	}
	var p50, p95 []string
	for _, bk := range r.Timeline {
		if bk.Queries == 0 {
			continue
		}
		p50 = append(p50, fmt.Sprintf("%.1f,%.1f", x(mid(bk)), y2(bk.P50MS)))
		p95 = append(p95, fmt.Sprintf("%.1f,%.1f", x(mid(bk)), y2(bk.P95MS)))
	}
	polyline(&b, p95, "#9467bd", "lookup p95")
	polyline(&b, p50, "#2ca02c", "lookup p50")
	legend(&b, panel2Top, []string{"#2ca02c", "lookup p50"}, []string{"#9467bd", "lookup p95 (log scale)"})

	// Time axis.
	for _, t := range ticks(0, dur, 10) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#444"/>`+"\n", x(t), panel2Top+panelH, x(t), panel2Top+panelH+5)
		text(&b, x(t), panel2Top+panelH+18, "middle", 11, secs(t))
	}
	text(&b, svgLeft+svgPlotW/2, panel2Top+panelH+36, "middle", 12, "time since the start of the measured run")
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func esc(s string) string {
	var b strings.Builder
	// EscapeText only fails on a failing writer; strings.Builder does not.
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func text(b *bytes.Buffer, x, y float64, anchor string, size int, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%d">%s</text>`+"\n", x, y, anchor, size, esc(s))
}

func frame(b *bytes.Buffer, top int) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", svgLeft, top, svgPlotW, panelH)
}

func band(b *bytes.Buffer, x0, x1 float64) {
	for _, top := range []int{panel1Top, panel2Top} {
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e08000" fill-opacity="0.12"><title>partition</title></rect>`+"\n", x0, top, math.Max(x1-x0, 1), panelH)
	}
}

func gridY(b *bytes.Buffer, y float64, label string) {
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e6e6e6"/>`+"\n", svgLeft, y, svgLeft+svgPlotW, y)
	text(b, svgLeft-6, y+4, "end", 11, label)
}

func polyline(b *bytes.Buffer, pts []string, color, title string) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"><title>%s</title></polyline>`+"\n", strings.Join(pts, " "), color, esc(title))
	for _, p := range pts {
		xy := strings.SplitN(p, ",", 2)
		fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", xy[0], xy[1], color)
	}
}

func legend(b *bytes.Buffer, top int, items ...[]string) {
	x := float64(svgLeft + 8)
	for _, it := range items {
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="14" height="3" fill="%s"/>`+"\n", x, top-9, it[0])
		text(b, x+18, float64(top-4), "start", 11, it[1])
		x += 30 + 6.5*float64(len(it[1]))
	}
}

// ticks returns about n round values from lo to hi inclusive.
func ticks(lo, hi float64, n int) []float64 {
	if hi <= lo || n < 1 {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

func fmtMS(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%gs", v/1000)
	}
	return fmt.Sprintf("%gms", v)
}
