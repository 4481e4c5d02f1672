package view

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

// EventType names a registry event (seed 004 §5).
type EventType string

// The registry events.
const (
	EventRegistered        EventType = "registry.agent.registered"
	EventDeregistered      EventType = "registry.agent.deregistered"
	EventHeartbeat         EventType = "registry.agent.heartbeat"
	EventStatus            EventType = "registry.agent.status"
	EventCapabilityChanged EventType = "registry.capability.changed"
)

// Reasons carried by deregistered events besides the seed-001 unregister
// reasons (SHUTDOWN, ERROR, MAINTENANCE, UPGRADE).
const (
	ReasonTimeout = "TIMEOUT" // no heartbeat within the liveness timeout
	// ReasonPeerDown: the agent's peer lost its connections and could not
	// be reached again, by this node or the peers it asked (package
	// liveness).
	ReasonPeerDown = "PEER_UNREACHABLE"
)

// Event is one change of the live view.
type Event struct {
	Type    EventType `json:"type"`
	Time    time.Time `json:"time"`
	AgentID string    `json:"agent_id,omitempty"`
	PeerID  string    `json:"peer_id,omitempty"`
	// Status is the agent's status after the change (status, heartbeat).
	Status record.Status `json:"status,omitempty"`
	// Reason says why an agent left (deregistered).
	Reason string `json:"reason,omitempty"`
	// Capability and Change ("added" or "removed") describe a
	// registry.capability.changed event: the capability gained its first
	// provider or lost its last one.
	Capability string `json:"capability,omitempty"`
	Change     string `json:"change,omitempty"`
	// Capabilities are the agent's capabilities (for agent events), used
	// by filters and useful to watchers.
	Capabilities []string `json:"capabilities,omitempty"`
	// Source is where the news came from.
	Source store.Source `json:"source,omitempty"`
	// Record is the agent's record, when the event concerns one.
	Record *record.SignedAgent `json:"-"`
}

// Filter selects events for a subscription (seed 004 `watch`).
type Filter struct {
	// Types to deliver; empty means every type except heartbeats.
	Types []EventType
	// Heartbeats opts in to registry.agent.heartbeat events.
	Heartbeats bool
	// Capability delivers only events about agents offering it, or
	// capability events for it.
	Capability string
	// Prefix delivers only events whose capability (or one of the agent's
	// capabilities) starts with it.
	Prefix string
	// AgentID delivers only events of one agent.
	AgentID string
}

func (f *Filter) matches(e *Event) bool {
	if e.Type == EventHeartbeat && !f.Heartbeats && !containsType(f.Types, EventHeartbeat) {
		return false
	}
	if len(f.Types) > 0 && !containsType(f.Types, e.Type) {
		if e.Type != EventHeartbeat || !f.Heartbeats {
			return false
		}
	}
	if f.AgentID != "" && e.AgentID != f.AgentID {
		return false
	}
	caps := e.Capabilities
	if e.Capability != "" {
		caps = []string{e.Capability}
	}
	if f.Capability != "" && !containsString(caps, f.Capability) {
		return false
	}
	if f.Prefix != "" {
		ok := false
		for _, c := range caps {
			if strings.HasPrefix(c, f.Prefix) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func containsType(ts []EventType, t EventType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// ErrLagged closes a subscription whose consumer fell behind by more than
// its buffer: it must resynchronise (list, then watch again) because
// events were lost.
var ErrLagged = errors.New("subscription lagged behind and was closed")

// ErrViewClosed closes subscriptions when the view closes.
var ErrViewClosed = errors.New("view closed")

// Subscription delivers events matching its filter on C until Close.
type Subscription struct {
	c      chan Event
	filter Filter
	hub    *hub
	once   sync.Once
	mu     sync.Mutex
	err    error
	// onClose runs once when the subscription ends (SubscribeNotify).
	onClose func()
}

// C is the event channel; it is closed when the subscription ends.
func (s *Subscription) C() <-chan Event { return s.c }

// Err says why the channel was closed (nil after Close).
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription. Safe to call more than once.
func (s *Subscription) Close() { s.hub.remove(s, nil) }

type hub struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
}

func (h *hub) subscribe(f Filter, buf int, onClose func()) *Subscription {
	if buf <= 0 {
		buf = 256
	}
	s := &Subscription{c: make(chan Event, buf), filter: f, hub: h, onClose: onClose}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*Subscription]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

func (h *hub) remove(s *Subscription, err error) {
	h.mu.Lock()
	_, ok := h.subs[s]
	delete(h.subs, s)
	h.mu.Unlock()
	if !ok {
		return
	}
	s.once.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.c)
		if s.onClose != nil {
			s.onClose()
		}
	})
}

// publish delivers e to every matching subscriber without blocking; a
// subscriber whose buffer is full is closed with ErrLagged.
func (h *hub) publish(e Event) {
	h.mu.Lock()
	var lagged []*Subscription
	for s := range h.subs {
		if !s.filter.matches(&e) {
			continue
		}
		select {
		case s.c <- e:
		default:
			lagged = append(lagged, s)
		}
	}
	h.mu.Unlock()
	for _, s := range lagged {
		h.remove(s, ErrLagged)
	}
}

func (h *hub) closeAll() {
	h.mu.Lock()
	subs := make([]*Subscription, 0, len(h.subs))
	for s := range h.subs {
		subs = append(subs, s)
	}
	h.mu.Unlock()
	for _, s := range subs {
		h.remove(s, ErrViewClosed)
	}
}
