package simnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// A curve is simnet run at several sizes with the same per-node interest
// (make simnet-curve): the catalog grows with the network, skills and
// capabilities are drawn uniformly, and every node asks for 3 capabilities
// of its own. CurveRow is one size's figures.
type CurveRow struct {
	Nodes int
	Scope string
	// Received messages and bytes per node per second (all protocols).
	MsgsPerS, BytesPerS float64
	// GossipMsgsPerS is the gossip share of MsgsPerS.
	GossipMsgsPerS float64
	// HeapMB is the live heap per node; ViewAgents the agents in a
	// node's view (mean, at the end); Shards the shard topics it joined.
	HeapMB, ViewAgents, Shards float64
	// RSSMB is the process's peak resident memory divided by the nodes up
	// at the peak (harness and stopped nodes' snapshots included).
	RSSMB  float64
	Recall float64
	// WallS is the run's wall time, warm-up included (0: not recorded).
	WallS float64
	// DetectP50 and DetectMax: crash → gone at every node (ms).
	DetectP50, DetectMax float64
	Pass                 bool
}

// CurveRowOf extracts a size's figures from its report.
func CurveRowOf(r *Report) CurveRow {
	g := r.Traffic.ByProtocol["gossip"]
	return CurveRow{
		Nodes: r.Scenario.Nodes, Scope: r.Scenario.Scope, MsgsPerS: r.Traffic.MsgsPerNodeS, BytesPerS: r.Traffic.BytesInPerNode,
		GossipMsgsPerS: g.MsgsPerS, HeapMB: r.Resources.HeapPerNodeMB, RSSMB: perNode(r.Resources.RSSPeakMB, r.Resources.PeakNodes),
		WallS:      r.WallSeconds,
		ViewAgents: r.Gossip.Interest.ViewPerNode, Shards: r.Gossip.Interest.ShardsPerNode,
		Recall: r.Queries.Outcome.Recall(), DetectP50: r.Churn.CrashToGoneAll.P50, DetectMax: r.Churn.CrashToGoneAll.Max,
		Pass: len(r.Failures) == 0 && !r.Interrupted,
	}
}

// ReadReports reads simnet JSON reports (agentd simnet --json) and returns
// their rows by size.
func ReadReports(paths []string) ([]CurveRow, error) {
	var rows []CurveRow
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		rows = append(rows, CurveRowOf(&r))
	}
	slices.SortStableFunc(rows, func(a, b CurveRow) int {
		if c := strings.Compare(b.Scope, a.Scope); c != 0 {
			return c // interest first
		}
		return a.Nodes - b.Nodes
	})
	return rows, nil
}

// WriteCurveTable writes the rows as a Markdown table, with each size's
// traffic as a multiple of the smallest size's of the same scope.
func WriteCurveTable(w io.Writer, rows []CurveRow) error {
	if len(rows) == 0 {
		return errors.New("simnet: no curve rows")
	}
	var b strings.Builder
	b.WriteString("| scope | nodes | received msg/s per node | × smallest | received KiB/s per node | gossip msg/s | live heap MB per node | RSS MB per node | agents in a view | shard topics | recall | crash → gone p50 / max (ms) | wall time | thresholds |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	base := map[string]float64{}
	for _, r := range rows {
		if _, ok := base[r.Scope]; !ok {
			base[r.Scope] = r.MsgsPerS
		}
	}
	for _, r := range rows {
		ratio := "—"
		if b := base[r.Scope]; b > 0 {
			ratio = fmt.Sprintf("%.2f", r.MsgsPerS/b)
		}
		pass := "pass"
		if !r.Pass {
			pass = "FAIL"
		}
		wall := "—"
		if r.WallS > 0 {
			wall = time.Duration(r.WallS * float64(time.Second)).Round(time.Second).String()
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f%% | %.0f / %.0f | %s | %s |\n",
			r.Scope, r.Nodes, r.MsgsPerS, ratio, r.BytesPerS/1024, r.GossipMsgsPerS, r.HeapMB, r.RSSMB, r.ViewAgents, r.Shards, 100*r.Recall, r.DetectP50, r.DetectMax, wall, pass)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ReplaceBetween replaces what lies between the lines begin and end of
// doc with body (the markers stay).
func ReplaceBetween(doc []byte, begin, end string, body []byte) ([]byte, error) {
	i := bytes.Index(doc, []byte(begin))
	j := bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return nil, fmt.Errorf("simnet: markers %q and %q not found in order", begin, end)
	}
	i += len(begin)
	var out bytes.Buffer
	out.Write(doc[:i])
	out.WriteString("\n")
	out.Write(body)
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// WriteCurveSVG plots the rows: one panel per figure against the number of
// nodes, each from zero to its largest value, one line per scope.
func WriteCurveSVG(w io.Writer, rows []CurveRow) error {
	if len(rows) == 0 {
		return errors.New("simnet: no curve rows")
	}
	panels := []struct {
		title string
		val   func(CurveRow) float64
		unit  string
	}{
		{"received messages per node per second", func(r CurveRow) float64 { return r.MsgsPerS }, "msg/s"},
		{"received bytes per node per second", func(r CurveRow) float64 { return r.BytesPerS / 1024 }, "KiB/s"},
		{"live heap per node", func(r CurveRow) float64 { return r.HeapMB }, "MB"},
		{"peak RSS per node", func(r CurveRow) float64 { return r.RSSMB }, "MB"},
		{"recall", func(r CurveRow) float64 { return 100 * r.Recall }, "%"},
		{"crash → gone at every node, p50", func(r CurveRow) float64 { return r.DetectP50 }, "ms"},
	}
	var sizes []int
	var scopes []string
	for _, r := range rows {
		if !slices.Contains(sizes, r.Nodes) {
			sizes = append(sizes, r.Nodes)
		}
		if !slices.Contains(scopes, r.Scope) {
			scopes = append(scopes, r.Scope)
		}
	}
	slices.Sort(sizes)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}
	const (
		left, width, ph, gap, top = 70.0, 520.0, 110.0, 50.0, 60.0
	)
	height := top + float64(len(panels))*(ph+gap) + 10
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif">`+"\n", left+width+30, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text(&b, left, 22, "start", 14, "agentd simnet: the same interest per node at every size (make simnet-curve)")
	for i, sc := range scopes {
		x := left + float64(i)*160
		fmt.Fprintf(&b, `<rect x="%.1f" y="34" width="14" height="3" fill="%s"/>`+"\n", x, colors[i%len(colors)])
		text(&b, x+18, 40, "start", 11, "scope "+sc)
	}
	xs := func(n int) float64 {
		i := slices.Index(sizes, n)
		if len(sizes) == 1 {
			return left + width/2
		}
		return left + 20 + float64(i)*(width-40)/float64(len(sizes)-1)
	}
	for k, p := range panels {
		y0 := top + float64(k)*(ph+gap) + 20
		hi := 0.0
		for _, r := range rows {
			hi = math.Max(hi, p.val(r))
		}
		if hi == 0 {
			hi = 1
		}
		text(&b, left, y0-6, "start", 12, p.title+" ("+p.unit+")")
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", left, y0, width, ph)
		for _, f := range []float64{0, 0.5, 1} {
			yy := y0 + ph - f*ph
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e6e6e6"/>`+"\n", left, yy, left+width, yy)
			text(&b, left-6, yy+4, "end", 11, fmt.Sprintf("%.3g", f*hi))
		}
		for _, n := range sizes {
			text(&b, xs(n), y0+ph+14, "middle", 11, fmt.Sprintf("%d nodes", n))
		}
		for i, sc := range scopes {
			var pts []string
			for _, r := range rows {
				if r.Scope == sc {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", xs(r.Nodes), y0+ph-p.val(r)/hi*ph))
				}
			}
			polyline(&b, pts, colors[i%len(colors)], p.title+", scope "+sc)
		}
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}
