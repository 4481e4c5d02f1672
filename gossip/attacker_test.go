package gossip

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// A neighbour that answers /agentd/sync/1.0.0 with lies: forged and
// undecodable records, a heard list that does not match, liveness claims
// out of range, an answer larger than asked for, garbage framing. Each is
// refused and counted, the one valid record of the answer still learnt,
// and nothing forged reaches the view (issue 12 item 7).
func TestRogueSyncAnswersAreRefusedAndCounted(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 1, testConfig())
		b := tn.nodes[0]
		rogue := tn.addHost(1)
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		tn.connect(b, rogue)

		honestID, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		honest := signAgent(t, honestID, 1)
		forgedID, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		forged := *signAgent(t, forgedID, 1)
		forged.Signature = slices.Clone(forged.Signature)
		forged.Signature[10] ^= 0x01
		announce := func(sa *record.SignedAgent) json.RawMessage {
			return json.RawMessage(sa.MarshalAnnounce())
		}
		heard := `{"age_ms":1000,"interval_ms":5000}`
		answer := func(recs []json.RawMessage, heards []string) []byte {
			rs := make([]string, len(recs))
			for i, r := range recs {
				rs[i] = string(r)
			}
			return []byte(fmt.Sprintf(`{"protocol_version":"v1.0","records":[%s],"heard":[%s]}`, strings.Join(rs, ","), strings.Join(heards, ",")))
		}
		var frame atomic.Pointer[[]byte]
		rogue.h.SetStreamHandler(protocol.ID(SyncProtocol), func(s network.Stream) {
			defer func() { _ = s.Close() }()
			if _, err := readFrame(bufio.NewReader(s), 4096); err != nil {
				_ = s.Reset()
				return
			}
			_, _ = s.Write(*frame.Load())
		})
		framed := func(body []byte) []byte {
			var buf strings.Builder
			_ = writeFrame(&buf, body)
			return []byte(buf.String())
		}

		cases := []struct {
			name   string
			frame  []byte
			learnt int    // records that reach the sink
			reason string // the rejects counter that must grow
		}{
			{"forged, undecodable and valid records", framed(answer(
				[]json.RawMessage{announce(&forged), json.RawMessage(`{"agent":1}`), announce(honest)},
				[]string{heard, heard, heard})), 1, "bad_signature"},
			{"heard list shorter than the records", framed(answer([]json.RawMessage{announce(honest)}, nil)), 0, "malformed"},
			{"liveness claimed beyond one day", framed(answer([]json.RawMessage{announce(honest)},
				[]string{`{"age_ms":0,"interval_ms":86400001}`})), 0, "malformed"},
			{"negative age", framed(answer([]json.RawMessage{announce(honest)},
				[]string{`{"age_ms":-1,"interval_ms":5000}`})), 0, "malformed"},
			{"member name in another case", framed([]byte(`{"protocol_version":"v1.0","Records":[],"records":[],"heard":[]}`)), 0, "malformed"},
			{"frame longer than the bound", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 0, "too_large"},
			{"non-minimal frame length", []byte{0x80, 0x00}, 0, "malformed"},
		}
		for _, c := range cases {
			f := c.frame
			frame.Store(&f)
			before := rejects(t, b.m, "sync", c.reason)
			n, err := b.g.Sync(tn.ctx)
			if c.learnt > 0 {
				if err != nil || n != c.learnt {
					t.Fatalf("%s: Sync = %d, %v; want %d learnt", c.name, n, err, c.learnt)
				}
			} else if err == nil && n != 0 {
				t.Fatalf("%s: Sync learnt %d records from a lying answer", c.name, n)
			}
			if got := rejects(t, b.m, "sync", c.reason); got <= before {
				t.Errorf("%s: sync %s = %v, not counted", c.name, c.reason, got)
			}
			if ds := b.sink.announcesOf(forgedID.AgentID, 1); len(ds) != 0 {
				t.Fatalf("%s: the forged record reached the view: %+v", c.name, ds)
			}
			if errors.Is(err, ErrSyncRefused) {
				t.Fatalf("%s: a lie was taken for a refusal: %v", c.name, err)
			}
		}
		if got := rejects(t, b.m, "sync", "malformed"); got < 5 {
			t.Errorf("sync malformed = %v, want >= 5 (one undecodable record and four bad answers)", got)
		}
	})
}
