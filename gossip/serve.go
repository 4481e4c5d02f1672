package gossip

import (
	"bufio"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/agentd/agentd/internal/peerlimit"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// requestAdmission is how agentd's request-and-answer stream protocols
// (sync, heartbeat pull) admit a request, in one order: a slot among the
// protocol's requests in progress, the request frame, the asker's rate
// limit, then the protocol's decoder. Every refusal but an unreadable
// frame is answered with the protocol's error frame and a seed code:
// ErrUnavailable (busy), ErrRateLimited, ErrMalformedPayload or
// ErrUnsupportedVersion.
type requestAdmission struct {
	name     string // the transport label of rejected requests: "sync", "pull"
	what     string // the requests in an error message: "sync requests"
	slots    chan struct{}
	limits   *peerlimit.Table
	readBuf  int // the request reader's buffer
	maxBytes int // the largest request frame
	// refuse encodes the protocol's error answer.
	refuse func(code, msg string) []byte
	// answer writes an answer and closes the stream; outcome is "busy",
	// "rate_limited" or "malformed" for a refusal.
	answer func(b []byte, outcome string)
}

// admit admits the request on s by r, decode parsing its frame. It
// reports whether the request was admitted; release then frees its slot,
// which the caller holds while it answers. A request not admitted has
// been answered (or the stream reset), and its slot freed.
func (g *Gossip) admit(s network.Stream, r requestAdmission, decode func(req []byte) error) (release func(), ok bool) {
	select {
	case r.slots <- struct{}{}:
	default:
		r.answer(r.refuse(record.CodeServiceUnavailable, "too many "+r.what+" in progress"), "busy")
		return nil, false
	}
	release = func() { <-r.slots }
	req, err := readFrame(bufio.NewReaderSize(s, r.readBuf), r.maxBytes)
	if err != nil {
		g.m.Reject(r.name, string(trust.ReasonOf(err)))
		_ = s.Reset()
		release()
		return nil, false
	}
	if !r.limits.Allow(s.Conn().RemotePeer()) {
		r.answer(r.refuse(record.CodeRateLimited, r.what+" from this peer are rate-limited"), "rate_limited")
		release()
		return nil, false
	}
	if err := decode(req); err != nil {
		reason := trust.ReasonOf(err)
		g.m.Reject(r.name, string(reason))
		code := record.CodeMalformedPayload
		if reason == trust.ReasonVersion {
			code = record.CodeUnsupportedVersion
		}
		r.answer(r.refuse(code, err.Error()), "malformed")
		release()
		return nil, false
	}
	return release, true
}

// answerStream writes the answer frame b and closes s; s is reset when
// the frame cannot be written.
func answerStream(s network.Stream, b []byte) error {
	if err := writeFrame(s, b); err != nil {
		_ = s.Reset()
		return err
	}
	return s.Close()
}
