package gossip

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
)

const (
	batchAgentA = "0b8c5b8e-4f6a-4d0e-9a43-2f1f3c8b9d01"
	batchAgentB = "7d2e9c44-1a3b-4c5d-8e6f-9a0b1c2d3e4f"
	batchGolden = `{"protocol_version":"v1.1","type":"beats","beats":[` +
		`{"agent_id":"` + batchAgentA + `","seq":8,"status":"HEALTHY","timestamp":1795284263518,"interval_ms":100000},` +
		`{"agent_id":"` + batchAgentB + `","seq":1795284263600,"timestamp":1795284263519}]}`
)

// TestBatchWire pins the heartbeat batch's wire form: the documented
// example decodes, its entries carry no peer_id, and it encodes back to
// the same bytes.
func TestBatchWire(t *testing.T) {
	m, err := Decode([]byte(batchGolden), 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindBeats || m.Version != BatchVersion || m.NewerMinor || m.Agent != nil || m.Beat != nil || len(m.Beats) != 2 {
		t.Fatalf("decoded %+v", m)
	}
	want := record.Beat{AgentID: batchAgentA, Seq: 8, Status: record.StatusHealthy, Timestamp: 1795284263518, IntervalMS: 100000}
	if m.Beats[0] != want || m.Beats[1].PeerID != "" || m.Beats[1].Status != "" {
		t.Fatalf("entries %+v", m.Beats)
	}
	enc, err := m.Encode()
	if err != nil || string(enc) != batchGolden {
		t.Fatalf("re-encoded (%v):\n got %s\nwant %s", err, enc, batchGolden)
	}
	// A later minor version may add members; they are ignored.
	later := strings.Replace(strings.Replace(batchGolden, `"v1.1"`, `"v1.4"`, 1), `"seq":8,`, `"seq":8,"load":0.5,`, 1)
	if m, err := Decode([]byte(later), 0); err != nil || !m.NewerMinor || len(m.Beats) != 2 {
		t.Fatalf("a v1.4 batch: %+v, %v", m, err)
	}
	// v1.3 is a version this node reads (beat requests): not flagged.
	if m, err := Decode([]byte(strings.Replace(batchGolden, `"v1.1"`, `"v1.3"`, 1)), 0); err != nil || m.NewerMinor || len(m.Beats) != 2 {
		t.Fatalf("a v1.3 batch: %+v, %v", m, err)
	}
}

func TestBatchDecodeErrors(t *testing.T) {
	entry := func(id string, seq int) string {
		return fmt.Sprintf(`{"agent_id":%q,"seq":%d,"timestamp":1795284263518}`, id, seq)
	}
	var many []string
	for i := range MaxBatchBeats + 1 {
		many = append(many, entry(uuid.NewString(), i+1))
	}
	batch := func(version string, entries ...string) string {
		return `{"protocol_version":"` + version + `","type":"beats","beats":[` + strings.Join(entries, ",") + `]}`
	}
	cases := []struct {
		name, in string
		field    string
	}{
		// A v1.0 node cannot read it; this version refuses to read it as
		// v1.0 so that nobody relays such a message to one.
		{"version 1.0", batch("v1.0", entry(batchAgentA, 1)), "protocol_version"},
		{"no entries", batch("v1.1"), "beats"},
		{"no beats member", `{"protocol_version":"v1.1","type":"beats"}`, "beats"},
		{"too many", batch("v1.1", many...), "beats"},
		{"twice the same agent", batch("v1.1", entry(batchAgentA, 1), entry(batchAgentA, 2)), "beats[1].agent_id"},
		{"bad agent id", batch("v1.1", entry("not-a-uuid", 1)), "agent_id"},
		{"seq 0", batch("v1.1", entry(batchAgentA, 0)), "seq"},
		{"no timestamp", batch("v1.1", `{"agent_id":"`+batchAgentA+`","seq":3}`), "timestamp"},
		{"bad status", batch("v1.1", `{"agent_id":"`+batchAgentA+`","seq":3,"timestamp":5,"status":"ALIVE"}`), "status"},
		{"member name case", batch("v1.1", `{"agent_id":"`+batchAgentA+`","Seq":3,"timestamp":5}`), "beats[0].Seq"},
		{"entry not an object", batch("v1.1", `7`), "beats[0]"},
		{"with a beat member", strings.Replace(batch("v1.1", entry(batchAgentA, 1)), `"type":"beats"`, `"type":"beats","beat":{"beat":{},"signature":"AA=="}`, 1), "type"},
		{"beats in a heartbeat", strings.Replace(string(readGolden(t, "heartbeat.json")), `"type":"heartbeat"`, `"type":"heartbeat","beats":[]`, 1), "beats"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Decode([]byte(c.in), 0)
			if err == nil {
				t.Fatalf("Decode accepted it: %+v", m)
			}
			if r := trust.ReasonOf(err); r != trust.ReasonMalformed {
				t.Fatalf("reason %q (%v), want malformed", r, err)
			}
			if f := record.FieldOf(err); f != c.field {
				t.Fatalf("field %q (%v), want %q", f, err, c.field)
			}
		})
	}
	// A malformed batch of a version this node reads is judged, not
	// waved through as "a later version's".
	if newerMinor([]byte(batch("v1.1", entry("x", 1)))) {
		t.Fatal("a v1.1 message counts as newer than this node's reading")
	}
	if newerMinor([]byte(batch("v1.3", entry("x", 1)))) {
		t.Fatal("a v1.3 message counts as newer than this node's reading (v1.3 beat requests)")
	}
	if !newerMinor([]byte(batch("v1.4", entry("x", 1)))) {
		t.Fatal("a v1.4 message does not count as newer")
	}
}

func TestEncodeBatchRejects(t *testing.T) {
	ok := record.Beat{AgentID: batchAgentA, Seq: 1, Timestamp: 1}
	for name, beats := range map[string][]record.Beat{
		"none":          nil,
		"too many":      make([]record.Beat, MaxBatchBeats+1),
		"a reason":      {{AgentID: batchAgentA, Seq: 1, Timestamp: 1, Reason: record.ReasonShutdown}},
		"twice":         {ok, ok},
		"invalid entry": {{AgentID: batchAgentA, Timestamp: 1}},
	} {
		if _, err := EncodeBatch(beats); err == nil {
			t.Errorf("%s: EncodeBatch accepted it", name)
		}
	}
}

// TestBatchValidation: what a node does with heartbeat batches from a
// peer that runs pubsub without agentd's validator. A batch under v1.0 is
// malformed (rejected); a v1.1 batch delivers, as heartbeats of its
// author, the entries that are news and asks for the record of an agent
// it does not know; the same heartbeats again, in other bytes, are a
// replay and deliver nothing.
func TestBatchValidation(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 1, testConfig())
		b := tn.nodes[0]
		x, pub, rec := tn.knownRawPeer(t, b) // X's agent key pinned at B

		unknown := uuid.NewString()
		now := time.Now().UnixMilli()
		beats := []record.Beat{
			{AgentID: x.id.AgentID, Seq: rec.Agent.Seq + 1, Status: record.StatusHealthy, Timestamp: now, IntervalMS: 5000},
			{AgentID: unknown, Seq: 9, Timestamp: now},
		}
		old := strings.Replace(mustBatch(t, beats), `"v1.1"`, `"v1.0"`, 1)
		pub([]byte(old))
		waitFor(t, 5*time.Second, "the v1.0 batch refused", func() bool { return rejects(t, b.m, "gossip", "malformed") == 1 })

		pub([]byte(mustBatch(t, beats)))
		waitFor(t, 5*time.Second, "the news delivered", func() bool {
			return len(b.sink.deliveries(func(d delivery) bool { return d.kind == KindHeartbeat })) == 1
		})
		d := b.sink.deliveries(func(d delivery) bool { return d.kind == KindHeartbeat })[0]
		if d.beat.Beat.AgentID != x.id.AgentID || d.beat.Beat.PeerID != x.h.ID().String() || d.beat.Signer != record.BeatSignerBatch || d.from != x.h.ID() {
			t.Fatalf("delivered %+v from %s", d.beat, d.from)
		}
		waitFor(t, 5*time.Second, "the unknown agent asked for", func() bool {
			return slices.ContainsFunc(b.sink.unknownCalls(), func(u unknownReq) bool { return u.agentID == unknown })
		})

		// X's heartbeat again in other bytes (a batch of it alone): pubsub
		// sees a new message, the sink's seq says it is not news.
		pub([]byte(mustBatch(t, beats[:1])))
		waitFor(t, 5*time.Second, "the replay ignored", func() bool { return rejects(t, b.m, "gossip", "replay") >= 1 })
		if n := len(b.sink.deliveries(func(d delivery) bool { return d.kind == KindHeartbeat })); n != 1 {
			t.Fatalf("%d heartbeats delivered, want 1", n)
		}
		if got := delivered(t, b.m, KindBeats); got != 1 {
			t.Fatalf("delivered{beats} = %v, want 1", got)
		}
	})
}

func mustBatch(t *testing.T, beats []record.Beat) string {
	t.Helper()
	b, err := EncodeBatch(beats)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
