package simnet

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	r0, r1 := 0.999, 0.9
	s0, s1 := 0.0, 0.02
	return &Report{
		Scenario: ScenarioInfo{Kind: KindPartition, Nodes: 20, BootstrapNodes: 3, DurationS: 60, Seed: 4, LatencyMS: 20, JitterMS: 5,
			QueryRate: 10, HeartbeatInterval: 5, LivenessTimeoutS: 30, StaleAfterS: 30},
		Setup: SetupInfo{StartS: 3, Converged: true, ConvergedS: 4},
		Queries: QueryStats{Issued: 600, Scored: 580, NoProvider: 20, Errors: map[string]int{"DISC_002": 20},
			Outcome: Outcome{Expected: 1000, Found: 990, ExpectedAll: 1100, FoundAll: 995, Returned: 1005, Live: 995, Stale: 5, StaleFlagged: 1},
			Recall:  0.99, RecallAllLive: 0.9045, StaleRate: 5.0 / 1005, StaleBySource: map[string]int{"gossip": 4, "cache": 1},
			StaleDeadFor: Percentiles{Count: 5, P50: 30200, Max: 31000}},
		Latency: LatencyInfo{All: Percentiles{Count: 600, P50: 0.1, P95: 150}, BySource: map[string]Percentiles{"gossip": {Count: 500}, "dht": {Count: 80, P50: 140}}},
		Gossip:  GossipStats{SampledOneIn: 1, Propagation: Percentiles{Count: 100, P50: 21}, ByKind: map[string]Percentiles{"heartbeat": {Count: 100, P50: 21}}},
		Churn:   ChurnStats{Reconverge: []Reconverge{{Event: EventHeal, AtS: 45, S: 7.5}}},
		Traffic: TrafficInfo{NodeSeconds: 1200, MsgsPerNodeS: 50, BytesOutPerNode: 30000, ByProtocol: map[string]ClassTraffic{"gossip": {MsgsPerS: 40}}},
		Timeline: []Bucket{
			{StartS: 0, Live: 20, Queries: 50, Recall: &r0, Stale: &s0, P50MS: 0.1, P95MS: 140},
			{StartS: 30, Live: 20, Queries: 50, Recall: &r1, Stale: &s1, P50MS: 0.2, P95MS: 9000},
			{StartS: 55, Live: 20},
		},
		Marks: []Mark{{AtS: 15, Kind: EventPartition, Detail: "10 | 10 <agent> & nodes"}, {AtS: 45, Kind: EventHeal}},
	}
}

func TestCheckThresholds(t *testing.T) {
	r := sampleReport()
	if f := r.Check(Thresholds{MinRecall: 0.99, MaxStale: 0.01}); len(f) != 0 {
		t.Fatalf("passing run failed: %v", f)
	}
	f := r.Check(Thresholds{MinRecall: 0.995, MaxStale: 0.001})
	if len(f) != 2 || !strings.Contains(f[0], "recall 0.9900 is below the minimum 0.9950") || !strings.Contains(f[1], "stale rate 0.0050 is above the maximum 0.0010") {
		t.Fatalf("failures: %q", f)
	}
	if len(r.Failures) != 2 || r.Thresholds.MinRecall != 0.995 {
		t.Fatal("Check did not record the thresholds and failures")
	}
	r.Queries.Scored = 0
	if f := r.Check(Thresholds{MaxStale: 1}); len(f) != 1 || !strings.Contains(f[0], "unmeasured") {
		t.Fatalf("a run with nothing to find must fail: %q", f)
	}
	r = sampleReport()
	r.Interrupted = true
	if f := r.Check(Thresholds{MinRecall: 0.5, MaxStale: 1}); len(f) != 1 || !strings.Contains(f[0], "interrupted") {
		t.Fatalf("interrupted: %q", f)
	}
}

func TestWriteText(t *testing.T) {
	r := sampleReport()
	r.Command = "agentd simnet --scenario partition"
	r.Check(Thresholds{MinRecall: 0.995, MaxStale: 0.01})
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"simnet: partition, 20 nodes (+3 bootstrap), 1m0s, seed 4",
		"command: agentd simnet --scenario partition",
		"99.00% (990/1000 live providers",
		"recall incl. unreachable",
		"stale rate", "cache 1, gossip 4",
		"lookup, dht", "gossip propagation",
		"complete views after heal at 45s",
		"FAIL:", "recall 0.9900 is below the minimum 0.9950",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	if err := r.WriteText(failWriter{}); err == nil {
		t.Fatal("a failing writer's error was lost")
	}
}

func TestWriteJSON(t *testing.T) {
	r := sampleReport()
	r.Check(Thresholds{MinRecall: 0.9, MaxStale: 0.01})
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	q := m["queries"].(map[string]any)
	for _, k := range []string{"recall", "stale_rate", "expected", "found", "returned_stale", "returned_stale_flagged", "stale_by_source", "stale_dead_for"} {
		if _, ok := q[k]; !ok {
			t.Errorf("queries.%s missing from %v", k, q)
		}
	}
	if q["found"].(float64) != 990 {
		t.Fatalf("found = %v", q["found"])
	}
	for _, k := range []string{"scenario", "setup", "lookup_latency", "gossip", "churn", "traffic", "resources", "timeline", "events", "thresholds"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s missing", k)
		}
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Queries.Found != 990 || len(back.Timeline) != 3 || *back.Timeline[1].Recall != 0.9 || back.Timeline[2].Recall != nil {
		t.Fatalf("round trip: %+v", back.Queries)
	}
}

func TestWriteSVGIsWellFormed(t *testing.T) {
	for name, r := range map[string]*Report{
		"sample": sampleReport(),
		"empty":  {Scenario: ScenarioInfo{Kind: KindSteady, DurationS: 10}},
		"open partition": func() *Report {
			r := sampleReport()
			r.Marks = r.Marks[:1]
			return r
		}(),
	} {
		var b bytes.Buffer
		if err := r.WriteSVG(&b); err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(&b)
		var root string
		elems := map[string]int{}
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", name, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				if root == "" {
					root = se.Name.Local
					if se.Name.Space != "http://www.w3.org/2000/svg" {
						t.Fatalf("%s: namespace %q", name, se.Name.Space)
					}
				}
				elems[se.Name.Local]++
			}
		}
		if root != "svg" {
			t.Fatalf("%s: root element %q", name, root)
		}
		if name == "sample" && (elems["polyline"] < 4 || elems["line"] < 4 || elems["rect"] < 3) {
			t.Fatalf("%s: missing plot elements: %v", name, elems)
		}
	}
}

func TestPercentiles(t *testing.T) {
	s := newSamples(1000)
	for i := 1; i <= 100; i++ {
		s.add(time.Duration(i) * time.Millisecond)
	}
	p := s.summary()
	if p.Count != 100 || p.P50 != 50 || p.P95 != 95 || p.P99 != 99 || p.Max != 100 || p.Mean != 50.5 {
		t.Fatalf("percentiles: %+v", p)
	}
	// Beyond its capacity the sample stays uniform; count, mean and max
	// stay exact.
	r := newSamples(100)
	for i := 1; i <= 10000; i++ {
		r.add(time.Duration(i) * time.Millisecond)
	}
	p = r.summary()
	if p.Count != 10000 || p.Max != 10000 || p.Mean != 5000.5 || p.P50 < 3500 || p.P50 > 6500 {
		t.Fatalf("reservoir: %+v", p)
	}
	if (newSamples(10).summary() != Percentiles{}) {
		t.Fatal("empty summary")
	}
	if ticks(0, 120, 10)[1] != 20 || len(ticks(5, 5, 3)) != 1 {
		t.Fatalf("ticks: %v", ticks(0, 120, 10))
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestSampleRatesOverTheElapsedTime: in real time a sampling tick comes a
// little after its bucket's end; its traffic still counts for that bucket,
// as a rate over the time since the previous sample (it once landed in the
// next bucket, divided by the few microseconds past the boundary).
func TestSampleRatesOverTheElapsedTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	vn := &vnode{tr: &traffic{}, state: stateUp}
	sm := &sim{s: Scenario{SampleInterval: 5 * time.Second}, nodes: []*vnode{vn}, t0: t0, lastSampleAt: t0}
	for range 3 {
		sm.buckets = append(sm.buckets, &bucketAcc{lat: newSamples(16)})
	}
	vn.tr.msgs[classGossip].Add(1000)
	sm.sampleAt(t0.Add(5*time.Second + 300*time.Microsecond))
	vn.tr.msgs[classGossip].Add(500)
	sm.sampleAt(t0.Add(10*time.Second + 2*time.Millisecond))
	if b := sm.buckets[0]; !b.sampled || b.msgs < 199.9 || b.msgs > 200 {
		t.Errorf("bucket 0: sampled %v, %.2f msg/s; want 1000 messages over 5 s", b.sampled, b.msgs)
	}
	if b := sm.buckets[1]; !b.sampled || b.msgs < 99.9 || b.msgs > 100 {
		t.Errorf("bucket 1: sampled %v, %.2f msg/s; want 500 messages over 5 s", b.sampled, b.msgs)
	}
	if sm.buckets[2].sampled {
		t.Error("bucket 2 sampled before its end")
	}
}
