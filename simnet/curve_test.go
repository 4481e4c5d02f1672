package simnet

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
)

func TestCurveTableAndPlot(t *testing.T) {
	rows := []CurveRow{
		{Nodes: 250, Scope: "interest", MsgsPerS: 150, BytesPerS: 2048, HeapMB: 9, RSSMB: 14, Recall: 0.995, DetectP50: 100, WallS: 125.4, Pass: true},
		{Nodes: 100, Scope: "interest", MsgsPerS: 100, BytesPerS: 1024, HeapMB: 6, Recall: 0.999, DetectP50: 100, Pass: true},
		{Nodes: 100, Scope: "full", MsgsPerS: 200, BytesPerS: 4096, HeapMB: 7, Recall: 0.999, DetectP50: 100},
	}
	var tb bytes.Buffer
	if err := WriteCurveTable(&tb, []CurveRow{rows[1], rows[0], rows[2]}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(tb.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("table has %d lines:\n%s", len(lines), tb.String())
	}
	if !strings.Contains(lines[3], "| interest | 250 | 150.0 | 1.50 |") {
		t.Errorf("ratio to the smallest size of the same scope missing: %s", lines[3])
	}
	if !strings.Contains(lines[3], "| 9.00 | 14.0 |") || !strings.HasSuffix(lines[3], "| 2m5s | pass |") {
		t.Errorf("memory or wall time missing: %s", lines[3])
	}
	if !strings.Contains(lines[4], "| full | 100 |") || !strings.HasSuffix(lines[4], "| — | FAIL |") {
		t.Errorf("full row: %s", lines[4])
	}
	doc := []byte("# x\n<!-- simnet-curve:begin -->\nSTALE-TABLE\n<!-- simnet-curve:end -->\ntail\n")
	out, err := ReplaceBetween(doc, "<!-- simnet-curve:begin -->", "<!-- simnet-curve:end -->", tb.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "STALE-TABLE") || !strings.Contains(string(out), lines[2]) || !strings.HasSuffix(string(out), "<!-- simnet-curve:end -->\ntail\n") {
		t.Errorf("ReplaceBetween:\n%s", out)
	}
	if _, err := ReplaceBetween([]byte("no markers"), "<a>", "<b>", nil); err == nil {
		t.Error("missing markers accepted")
	}
	var svg bytes.Buffer
	if err := WriteCurveSVG(&svg, rows); err != nil {
		t.Fatal(err)
	}
	img := svg.String()
	d := xml.NewDecoder(strings.NewReader(img))
	for {
		if _, err := d.Token(); err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed XML: %v", err)
			}
			break
		}
	}
	if n := strings.Count(img, "<polyline"); n != 12 {
		t.Errorf("%d polylines, want 6 panels × 2 scopes", n)
	}
	if err := WriteCurveTable(&tb, nil); err == nil {
		t.Error("empty curve accepted")
	}
}
