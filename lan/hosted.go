package lan

import (
	"slices"
	"sync"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// hostedAgent is one agent this node hosts and advertises.
type hostedAgent struct {
	rec    *record.SignedAgent
	hash   [32]byte
	status record.Status
	// canSign: the record's public_key is the identity's agent key, so
	// this node can sign the agent's UDP messages. A record its client
	// signed with another key is advertised by mDNS and in discovery
	// responses only.
	canSign bool
}

func (h *hostedAgent) id() string { return h.rec.Agent.AgentID }

// hostedSet is the set of hosted agents as last read from Deps.Locals.
type hostedSet struct {
	id *trust.Identity

	mu       sync.Mutex
	m        map[string]*hostedAgent
	status   map[string]record.Status
	removed  map[string][32]byte // unregistered explicitly: not advertised again while Locals returns the same record
	closed   bool
	snapshot []*hostedAgent
}

func newHostedSet(id *trust.Identity) *hostedSet {
	return &hostedSet{id: id, m: map[string]*hostedAgent{}, status: map[string]record.Status{}, removed: map[string][32]byte{}}
}

// update replaces the set with recs and returns the agents that are new or
// whose record changed, and those that are gone.
func (s *hostedSet) update(recs []*record.SignedAgent) (changed, gone []*hostedAgent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, sa := range recs {
		if sa == nil {
			continue
		}
		id := sa.Agent.AgentID
		hash := sa.Hash()
		if seen[id] {
			continue
		}
		seen[id] = true
		if h, ok := s.removed[id]; ok {
			if h == hash {
				continue
			}
			delete(s.removed, id)
		}
		if old, ok := s.m[id]; ok && old.hash == hash {
			continue
		}
		h := &hostedAgent{rec: sa, hash: hash, status: s.statusOf(id), canSign: s.canSign(sa)}
		s.m[id] = h
		changed = append(changed, h)
	}
	for id, h := range s.m {
		if !seen[id] {
			delete(s.m, id)
			gone = append(gone, h)
		}
	}
	for id := range s.removed {
		if !seen[id] {
			delete(s.removed, id)
		}
	}
	for id := range s.status {
		if !seen[id] {
			delete(s.status, id)
		}
	}
	s.snapshot = nil
	sortAgents(changed)
	sortAgents(gone)
	return changed, gone
}

func (s *hostedSet) statusOf(id string) record.Status {
	if st, ok := s.status[id]; ok {
		return st
	}
	return record.StatusHealthy
}

func (s *hostedSet) canSign(sa *record.SignedAgent) bool {
	if s.id == nil || s.id.AgentKey == nil {
		return false
	}
	pub, err := sa.AgentPublicKey()
	return err == nil && pub.Equal(&s.id.AgentKey.PublicKey)
}

// list returns the hosted agents sorted by agent id.
func (s *hostedSet) list() []*hostedAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snapshot == nil {
		s.snapshot = make([]*hostedAgent, 0, len(s.m))
		for _, h := range s.m {
			s.snapshot = append(s.snapshot, h)
		}
		sortAgents(s.snapshot)
	}
	return s.snapshot
}

// has reports whether agentID is hosted here (or was, until it was
// unregistered explicitly while Locals still lists it).
func (s *hostedSet) has(agentID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[agentID]
	if !ok {
		_, ok = s.removed[agentID]
	}
	return ok
}

// remove takes an agent out of the set until Locals returns another
// record for it; it returns the agent, or nil if it was not hosted.
func (s *hostedSet) remove(agentID string) *hostedAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.m[agentID]
	if !ok {
		return nil
	}
	delete(s.m, agentID)
	s.removed[agentID] = h.hash
	s.snapshot = nil
	return h
}

// removeAll empties the set for good (Close).
func (s *hostedSet) removeAll() []*hostedAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*hostedAgent, 0, len(s.m))
	for id, h := range s.m {
		out = append(out, h)
		// Still ours: our own unregisters loop back while we close.
		s.removed[id] = h.hash
	}
	s.m = map[string]*hostedAgent{}
	s.closed = true
	s.snapshot = nil
	sortAgents(out)
	return out
}

// setStatus records the status of a hosted agent and returns the agent
// (nil when it is not hosted).
func (s *hostedSet) setStatus(agentID string, st record.Status) *hostedAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status[agentID] = st
	h, ok := s.m[agentID]
	if !ok {
		return nil
	}
	c := *h
	c.status = st
	s.m[agentID] = &c
	s.snapshot = nil
	return &c
}

func sortAgents(hs []*hostedAgent) {
	slices.SortFunc(hs, func(a, b *hostedAgent) int {
		switch {
		case a.id() < b.id():
			return -1
		case a.id() > b.id():
			return 1
		}
		return 0
	})
}
