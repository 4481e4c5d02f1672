package gossip

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// FuzzDecode: every payload either fails with a classified reason or
// decodes to a message that re-encodes, decodes back to the same signed
// content, and re-encodes to the same bytes (encoding is a fixed point).
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"v1.0","type":"heartbeat","beat":{"beat":{},"signature":"AA=="}}`))
	f.Add([]byte(`{"protocol_version":"v1.9","type":"announce","announce":{"agent":{}}}`))
	f.Add([]byte(batchGolden))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data, 0)
		if err != nil {
			if trust.ReasonOf(err) == "" {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		switch {
		case m.Kind == KindBeats:
			if m.Agent != nil || m.Beat != nil || len(m.Beats) == 0 || len(m.Beats) > MaxBatchBeats {
				t.Fatalf("decoded batch %+v", m)
			}
		case m.Kind == KindWanted:
			if m.Agent != nil || m.Beat != nil || m.Beats != nil || m.Wanted == nil || len(m.Wanted.Agents) == 0 || len(m.Wanted.Agents) > MaxPullAgents {
				t.Fatalf("decoded beat request %+v", m)
			}
		case (m.Agent == nil) == (m.Beat == nil) || !ValidKind(m.Kind) || m.Beats != nil || m.Wanted != nil:
			t.Fatalf("decoded %+v", m)
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatalf("a decoded message does not encode: %v", err)
		}
		m2, err := Decode(enc, 0)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v\n%s", err, enc)
		}
		if !m.Equal(m2) {
			t.Fatalf("round trip changed the content:\n%s", enc)
		}
		enc2, err := m2.Encode()
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not a fixed point: %v\n%s\n%s", err, enc, enc2)
		}
	})
}

// FuzzSyncRequest: a request either fails or survives a round trip.
func FuzzSyncRequest(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"v1.0","limit":10}`))
	f.Add([]byte(`{"protocol_version":"v1.0","limit":10,"shards":["00ab","ffff"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeSyncRequest(data)
		if err != nil {
			return
		}
		if r.Limit < 0 || r.Limit > maxSyncLimit {
			t.Fatalf("limit %d accepted", r.Limit)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decodeSyncRequest(b)
		if err != nil || r2.ProtocolVersion != r.ProtocolVersion || r2.Limit != r.Limit || !slices.Equal(r2.Shards, r.Shards) && (len(r2.Shards) > 0 || len(r.Shards) > 0) {
			t.Fatalf("round trip: %+v, %v (was %+v)", r2, err, r)
		}
	})
}

// FuzzSyncResponse: an answer either fails or yields at most limit
// records, which re-encode into an answer that decodes to the same records;
// and a memo shared by every input (as a node's is by every answer) changes
// nothing of what an answer decodes to.
func FuzzSyncResponse(f *testing.F) {
	memo := newRecordMemo()
	// A real record three times, the third in other bytes: the memo's
	// hits and misses in one answer.
	b, err := os.ReadFile(filepath.Join("testdata", "golden", "announce.json"))
	if err != nil {
		f.Fatal(err)
	}
	var env struct {
		Announce json.RawMessage `json:"announce"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		f.Fatal(err)
	}
	rec := string(env.Announce)
	f.Add([]byte(`{"protocol_version":"v1.0","records":[` + rec + `,` + rec + `, ` + rec + `],"heard":[{"age_ms":1,"interval_ms":5000},{"age_ms":2,"interval_ms":5000},{"age_ms":3,"interval_ms":5000}]}`))
	f.Add([]byte(`{"protocol_version":"v1.0","records":[],"heard":[]}`))
	f.Add([]byte(`{"protocol_version":"v1.0","records":[],"heard":[],"error":{"code":"ErrRateLimited","message":"slow down"}}`))
	f.Add([]byte(`{"protocol_version":"v1.0","records":[{}],"heard":[{"age_ms":1500,"interval_ms":5000}]}`))
	const limit = 4
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, bad, err := decodeSyncResponse(data, limit, nil)
		for range 2 { // the second time from the memo
			mrecs, mbad, merr := decodeSyncResponse(data, limit, memo)
			if (merr == nil) != (err == nil) || mbad != bad || len(mrecs) != len(recs) {
				t.Fatalf("with the memo: %d records, %d bad, %v; without: %d, %d, %v", len(mrecs), mbad, merr, len(recs), bad, err)
			}
			for i := range recs {
				if !bytes.Equal(recs[i].Record.Canonical(), mrecs[i].Record.Canonical()) || !bytes.Equal(recs[i].Record.Signature, mrecs[i].Record.Signature) ||
					!bytes.Equal(recs[i].Record.PeerSignature, mrecs[i].Record.PeerSignature) || recs[i].Heard != mrecs[i].Heard {
					t.Fatalf("record %d differs with the memo", i)
				}
			}
		}
		if err != nil {
			return
		}
		if len(recs)+bad > limit || bad < 0 {
			t.Fatalf("%d records and %d bad for limit %d", len(recs), bad, limit)
		}
		resp := syncResponse{ProtocolVersion: record.ProtocolVersion, Records: []record.Announce{}, Heard: []syncHeard{}}
		for _, lr := range recs {
			if lr.Heard.Age < 0 || lr.Heard.Interval < 0 || lr.Heard.Age > maxHeardMS*time.Millisecond || lr.Heard.Interval > maxHeardMS*time.Millisecond {
				t.Fatalf("heard %+v out of range", lr.Heard)
			}
			resp.Records = append(resp.Records, lr.Record.Announce())
			resp.Heard = append(resp.Heard, syncHeard{AgeMS: lr.Heard.Age.Milliseconds(), IntervalMS: lr.Heard.Interval.Milliseconds()})
		}
		b, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		recs2, bad2, err := decodeSyncResponse(b, limit, nil)
		if err != nil || bad2 != 0 || len(recs2) != len(recs) {
			t.Fatalf("round trip: %d records, %d bad, %v (was %d)", len(recs2), bad2, err, len(recs))
		}
		for i := range recs {
			a, b := recs[i].Record, recs2[i].Record
			if !bytes.Equal(a.Canonical(), b.Canonical()) || !bytes.Equal(a.Signature, b.Signature) ||
				!bytes.Equal(a.PeerSignature, b.PeerSignature) || recs[i].Heard != recs2[i].Heard {
				t.Fatalf("record %d changed", i)
			}
		}
	})
}

// FuzzReadFrame: a frame read from arbitrary bytes is within the limit and
// is exactly what writeFrame would have produced at the start of the input.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{3, 'a', 'b', 'c'})
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	const max = 64
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := readFrame(bufio.NewReader(bytes.NewReader(data)), max)
		if err != nil {
			return
		}
		if len(b) > max {
			t.Fatalf("frame of %d bytes passed a %d-byte limit", len(b), max)
		}
		var w bytes.Buffer
		if err := writeFrame(&w, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, w.Bytes()) {
			t.Fatalf("frame %x does not re-encode to a prefix of %x", w.Bytes(), data)
		}
	})
}

func FuzzPullRequest(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"v1.0","agents":["6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a10"]}`))
	f.Add([]byte(`{"protocol_version":"v1.3","agents":["6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a10","6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a11"],"more":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ids, err := DecodePullRequest(data)
		if err != nil {
			if trust.ReasonOf(err) == "" {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(ids) == 0 || len(ids) > MaxPullAgents {
			t.Fatalf("%d ids accepted", len(ids))
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if record.ValidateAgentID(id) != nil || seen[id] {
				t.Fatalf("id %q accepted (seen before: %v)", id, seen[id])
			}
			seen[id] = true
		}
		// What was accepted encodes and decodes to the same ids.
		b, err := EncodePullRequest(ids)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodePullRequest(b)
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("round trip: %v, %v", again, err)
		}
	})
}

func FuzzPullAnswer(f *testing.F) {
	asked := []string{"6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a10", "6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a11"}
	f.Add([]byte(`{"protocol_version":"v1.0","beats":[]}`))
	f.Add([]byte(`{"protocol_version":"v1.0","beats":[{"agent_id":"6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a10","seq":7,"status":"HEALTHY","timestamp":1795284263518,"interval_ms":5000}]}`))
	f.Add([]byte(`{"protocol_version":"v1.0","beats":[],"error":{"code":"ErrRateLimited","message":"slow down"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		beats, err := DecodePullAnswer(data, asked)
		if err != nil {
			if !errors.Is(err, ErrPullRefused) && trust.ReasonOf(err) == "" {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(beats) > len(asked) {
			t.Fatalf("%d beats for %d asked", len(beats), len(asked))
		}
		seen := map[string]bool{}
		for _, b := range beats {
			if !slices.Contains(asked, b.AgentID) || seen[b.AgentID] || b.PeerID != "" || b.Reason != "" || b.ValidateUnbound() != nil {
				t.Fatalf("beat %+v accepted", b)
			}
			seen[b.AgentID] = true
		}
	})
}
