// Package journal remembers, per agent, what this node heard about it and
// what it decided: which transports delivered its records and heartbeats
// and when, and the last refusals with their reasons. It answers the
// operator's question "why can't this node see agent X?" (agentd explain,
// GET /explain) where the metrics only count refusals by reason.
//
// The journal is bounded: it holds at most MaxAgents agents, forgetting the
// one updated longest ago, and per agent at most MaxRefusals refusals (a
// run of refusals for the same reason takes one slot, with a count),
// MaxCapabilities capabilities and a short detail per refusal. A peer that
// floods refused records under fresh agent ids pins at most about 3.5 KB
// per id, 29 MB at DefaultMaxAgents (TestJournalWorstCaseMemory); gossip's
// peer scoring penalises every such message. Its
// cost on the hot path is one map lookup and a list move under a mutex per
// verified record or heartbeat, next to a signature verification that
// costs a hundred times more. A nil *Journal records nothing.
package journal

import (
	"container/list"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of New.
const (
	DefaultMaxAgents = 8192
	MaxRefusals      = 6
	// MaxCapabilities bounds the capabilities remembered per agent (a
	// refused record may claim any number).
	MaxCapabilities = 8
	// maxDetail bounds a refusal's detail, in bytes.
	maxDetail = 160
)

// Kinds of what was heard.
const (
	KindRecord = "record" // a signed agent record (Announce)
	KindBeat   = "beat"   // a heartbeat, status or unregister statement
	KindEntry  = "entry"  // an unsigned catalog or LAN entry
)

// Verdict is one decision about something heard of an agent.
type Verdict struct {
	At time.Time `json:"at"`
	// Transport names where it came from: gossip, sync, dht, lan,
	// skillcenter, registry (POST /agents, the WebSocket), local (this
	// node's own agents), view (the live view's admission).
	Transport string `json:"transport"`
	Kind      string `json:"kind"`
	Seq       uint64 `json:"seq,omitempty"`
	PeerID    string `json:"peer_id,omitempty"`
	Accepted  bool   `json:"accepted"`
	// Reason is the refusal reason, the label of agentd_rejects_total.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Count is how many refusals in a row this one stands for: a refusal
	// of the same transport, kind and reason as the last one updates it
	// (time, seq, peer, detail) instead of taking a slot.
	Count uint64 `json:"count,omitempty"`
}

// Heard sums up what one transport delivered of an agent that passed
// verification.
type Heard struct {
	Transport string    `json:"transport"`
	Kind      string    `json:"kind"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
	Count     uint64    `json:"count"`
	LastSeq   uint64    `json:"last_seq,omitempty"`
}

// Entry is what the journal holds about one agent.
type Entry struct {
	AgentID string  `json:"agent_id"`
	Heard   []Heard `json:"heard"`
	// Refusals are the last refusals, oldest first.
	Refusals []Verdict `json:"refusals"`
	// Capabilities are those of the last refused record (an accepted
	// record's are in the live view).
	Capabilities []string `json:"capabilities,omitempty"`
	// Left says when and why the agent last left the live view (nil: it
	// has not, since the journal knows it).
	Left *Left `json:"left,omitempty"`
}

// Left is an agent's departure from the live view.
type Left struct {
	At time.Time `json:"at"`
	// Reason is the deregistered event's reason: timeout, a seed-001
	// unregister reason (SHUTDOWN, ERROR, …), peer_down, pruned, …
	Reason string `json:"reason"`
}

type entry struct {
	id       string
	heard    []Heard
	refusals []Verdict
	caps     []string
	left     *Left
	el       *list.Element
}

// Journal is the bounded per-agent journal. Safe for concurrent use.
type Journal struct {
	max   int
	mu    sync.Mutex
	m     map[string]*entry
	order *list.List // front: updated most recently
}

// New returns a journal of at most maxAgents agents (≤ 0: DefaultMaxAgents).
func New(maxAgents int) *Journal {
	if maxAgents <= 0 {
		maxAgents = DefaultMaxAgents
	}
	return &Journal{max: maxAgents, m: map[string]*entry{}, order: list.New()}
}

// Note records a verdict about agentID. caps, when not nil, replaces the
// capabilities remembered for the agent (those of a record). An empty
// agentID is ignored.
func (j *Journal) Note(agentID string, v Verdict, caps []string) {
	if j == nil || agentID == "" {
		return
	}
	if v.At.IsZero() {
		v.At = time.Now()
	}
	if len(v.Detail) > maxDetail {
		v.Detail = strings.ToValidUTF8(v.Detail[:maxDetail], "") + "…"
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	e := j.touchLocked(agentID)
	if len(caps) > MaxCapabilities {
		caps = slices.Clone(caps[:MaxCapabilities]) // not the caller's whole array
	}
	if caps != nil {
		e.caps = caps
	}
	if !v.Accepted {
		if n := len(e.refusals); n > 0 {
			if last := &e.refusals[n-1]; last.Transport == v.Transport && last.Kind == v.Kind && last.Reason == v.Reason {
				v.Count = last.Count + 1
				*last = v
				return
			}
		}
		v.Count = 1
		if len(e.refusals) >= MaxRefusals {
			copy(e.refusals, e.refusals[1:])
			e.refusals = e.refusals[:MaxRefusals-1]
		}
		e.refusals = append(e.refusals, v)
		return
	}
	for i := range e.heard {
		h := &e.heard[i]
		if h.Transport == v.Transport && h.Kind == v.Kind {
			h.Last = v.At
			h.Count++
			if v.Seq > h.LastSeq {
				h.LastSeq = v.Seq
			}
			return
		}
	}
	e.heard = append(e.heard, Heard{Transport: v.Transport, Kind: v.Kind, First: v.At, Last: v.At, Count: 1, LastSeq: v.Seq})
}

// NoteLeft records that agentID left the live view at at, for reason.
func (j *Journal) NoteLeft(agentID string, at time.Time, reason string) {
	if j == nil || agentID == "" {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.touchLocked(agentID).left = &Left{At: at, Reason: reason}
}

// touchLocked returns agentID's entry, created if need be, as the most
// recently updated; it forgets the least recently updated one when full.
func (j *Journal) touchLocked(agentID string) *entry {
	if e := j.m[agentID]; e != nil {
		j.order.MoveToFront(e.el)
		return e
	}
	if len(j.m) >= j.max {
		old := j.order.Back()
		delete(j.m, old.Value.(*entry).id)
		j.order.Remove(old)
	}
	e := &entry{id: agentID}
	e.el = j.order.PushFront(e)
	j.m[agentID] = e
	return e
}

// Get returns a copy of what the journal holds about agentID.
func (j *Journal) Get(agentID string) (Entry, bool) {
	if j == nil {
		return Entry{}, false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	e := j.m[agentID]
	if e == nil {
		return Entry{}, false
	}
	return e.snapshot(), true
}

func (e *entry) snapshot() Entry {
	out := Entry{AgentID: e.id, Heard: slices.Clone(e.heard), Refusals: slices.Clone(e.refusals), Capabilities: slices.Clone(e.caps)}
	if e.left != nil {
		l := *e.left
		out.Left = &l
	}
	if out.Heard == nil {
		out.Heard = []Heard{}
	}
	if out.Refusals == nil {
		out.Refusals = []Verdict{}
	}
	return out
}

// Offering returns the entries whose last record names capability and
// that were refused at least once, newest first, at most limit.
func (j *Journal) Offering(capability string, limit int) []Entry {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Entry
	for el := j.order.Front(); el != nil && len(out) < limit; el = el.Next() {
		e := el.Value.(*entry)
		if len(e.refusals) > 0 && slices.Contains(e.caps, capability) {
			out = append(out, e.snapshot())
		}
	}
	return out
}

// Len returns the number of agents in the journal.
func (j *Journal) Len() int {
	if j == nil {
		return 0
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.m)
}
