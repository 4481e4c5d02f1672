package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/view"
	"github.com/coder/websocket"
)

// FuzzWSFrame sends arbitrary frames (text, or binary on the
// agent-discovery binding) to a session's dispatcher: every frame is
// answered, every answer is a JSON text frame with a type or a binary
// frame with an ANNOUNCE or RESPONSE prefix, and nothing panics.
func FuzzWSFrame(f *testing.F) {
	n := newNode(f, nodeOpts{})
	s, err := New(n.Node, Config{Version: "fuzz"}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	f.Add(false, seedFile(f, "003-register.json"))
	f.Add(false, seedFile(f, "003-list.json"))
	f.Add(false, []byte(`{"type":"watch","capability":"c","prefix":"p","agent_id":"agent-1","heartbeats":true,"types":["registry.agent.status"]}`))
	f.Add(false, []byte(`{"type":"unregister","id":"agent-1"}`))
	f.Add(false, []byte(`{"type":"ping","id":"x"}`))
	f.Add(false, []byte(`{"type":"unwatch"}`))
	f.Add(true, append([]byte{MsgAnnounce}, announceJSON(f, spec("skill-f", "cap-f"))...))
	f.Add(true, append([]byte{MsgQuery}, `{"protocol_version":"v1.0","query":{"capability":"cap-f","tags":["tier=core"],"version":">=1.0.0"}}`...))
	f.Add(true, append([]byte{MsgQuery}, `{"protocol_version":"v2.0","query":{"capability":"x"}}`...))
	f.Add(true, []byte{MsgResponse, '{', '}'})
	f.Fuzz(func(t *testing.T, binary bool, frame []byte) {
		ss := &session{s: s, binary: binary, acc: openAccess, log: slog.New(slog.DiscardHandler),
			out: make(chan outFrame, 4096), watch: make(chan *view.Subscription, 1), bound: map[string]bool{}}
		ss.ctx, ss.cancel = context.WithCancel(context.Background())
		defer ss.cancel()
		if binary && len(frame) > 0 && frame[0] <= MsgResponse {
			ss.handleBinary(frame)
		} else {
			ss.handleText(frame)
		}
		select {
		case sub := <-ss.watch:
			if sub != nil {
				sub.Close()
			}
		default:
		}
		if len(ss.out) == 0 {
			t.Fatalf("frame %q (binary %v) got no answer", frame, binary)
		}
		for len(ss.out) > 0 {
			o := <-ss.out
			if o.typ == websocket.MessageBinary {
				if len(o.data) == 0 || (o.data[0] != MsgAnnounce && o.data[0] != MsgResponse) {
					t.Fatalf("binary answer % x", o.data[:min(len(o.data), 8)])
				}
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(o.data, &m); err != nil || m["type"] == nil {
				t.Fatalf("answer %q is not a typed JSON frame", o.data)
			}
			if m["type"] == record.WSTypeError && (m["code"] == "" || m["message"] == "") {
				t.Fatalf("error frame without code or message: %s", o.data)
			}
		}
		// Release the registrations bound to this pretend connection.
		ss.s.mu.Lock()
		for id := range ss.bound {
			delete(ss.s.wsBound, id)
		}
		ss.s.mu.Unlock()
	})
}
