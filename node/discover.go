package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

// Query is a discovery query: the store's filter plus how far to look.
type Query struct {
	store.Filter
	// LocalOnly answers from the live view and the cache only.
	LocalOnly bool
	// Timeout bounds the lookup (default Config.LookupTimeout).
	Timeout time.Duration
}

// Result is one discovered agent.
type Result struct {
	// Record is the verified signed record (nil for catalog entries that
	// carry no agent signature).
	Record *record.SignedAgent
	// Agent is the agent object (Record.Agent, or the catalog's entry).
	Agent *record.Agent
	// Source says where the answer came from.
	Source store.Source
	// Age is how long ago the answer was last confirmed (heard, fetched,
	// cached).
	Age time.Duration
	// Stale marks answers from expired cache entries.
	Stale bool
	// Status is the agent's effective status when known.
	Status record.Status
}

// DiscoveryError is a failed lookup with its seed-001 code.
type DiscoveryError struct {
	Code    string // record.CodeNoSkillsFound, CodeDiscoveryTimeout, CodeNetworkError
	Message string
	// Tried lists the resolver steps that ran.
	Tried []string
}

func (e *DiscoveryError) Error() string { return e.Code + ": " + e.Message }

// Discover answers q through the fallback chain: the local view, the LAN,
// the DHT, the SkillCenter catalog, and finally expired cache entries
// marked stale. The first step that finds something answers; every result
// says which step that was and how old the answer is.
func (n *Node) Discover(ctx context.Context, q Query) ([]Result, error) {
	return n.discover(ctx, q, nil)
}

// Trace is the path one lookup took through the resolver.
type Trace struct {
	Steps []Step `json:"steps"`
	// AnsweredBy is the step that answered ("" when none did).
	AnsweredBy string `json:"answered_by,omitempty"`
	// Took is the whole lookup's duration.
	Took time.Duration `json:"took_ns"`
}

// Step is one resolver step of a traced lookup.
type Step struct {
	// Name is local, lan, dht, shard (the scoped node's newly joined
	// shard), skillcenter or cache.
	Name string `json:"name"`
	// Took is how long the step ran.
	Took time.Duration `json:"took_ns"`
	// Found is how many matching agents it produced.
	Found int `json:"found"`
	// Error is why it failed, when it did.
	Error string `json:"error,omitempty"`
	// Note says why a step passed on although it found agents, or why it
	// was skipped.
	Note string `json:"note,omitempty"`
}

// DiscoverTrace is Discover that also reports the resolver's path: each
// step that ran, how long it took, what it found and which one answered.
func (n *Node) DiscoverTrace(ctx context.Context, q Query) ([]Result, *Trace, error) {
	tr := &Trace{Steps: []Step{}}
	start := time.Now()
	res, err := n.discover(ctx, q, tr)
	tr.Took = time.Since(start)
	return res, tr, err
}

// step records one resolver step in t (nil: not traced).
func (t *Trace) step(name string, began time.Time, found int, err error, note string) {
	if t == nil {
		return
	}
	s := Step{Name: name, Took: time.Since(began), Found: found, Note: note}
	if err != nil {
		s.Error = err.Error()
	}
	t.Steps = append(t.Steps, s)
}

func (n *Node) discover(ctx context.Context, q Query, tr *Trace) ([]Result, error) {
	start := time.Now()
	m, err := q.Compile()
	if err != nil {
		return nil, err
	}
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = n.cfg.LookupTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var tried []string
	var netErr error
	var catStale []Result
	done := func(step string, src store.Source, res []Result) ([]Result, error) {
		if tr != nil {
			tr.AnsweredBy = step
		}
		n.m.Lookups.WithLabelValues(string(src), "hit").Inc()
		n.m.LookupLatency.WithLabelValues(string(src)).Observe(time.Since(start).Seconds())
		return res, nil
	}

	// 1. The live view. On a scoped node it holds only the node's
	// interest: a query for a capability outside it (or by skill alone)
	// goes on to the network, and the capability joins the interest, so
	// the next query is answered here. What the view has is the answer of
	// last resort before the cache.
	tried = append(tried, "local")
	began := time.Now()
	viewRes := n.fromView(m, q.Limit)
	whole := q.LocalOnly || n.covers(q.Capability) || (q.Capability == "" && q.Skill == "")
	note := ""
	if len(viewRes) > 0 && !whole {
		note = "the capability is outside this node's interest: the view may not hold every agent offering it, so the network is asked"
	}
	tr.step("local", began, len(viewRes), nil, note)
	if len(viewRes) > 0 && whole {
		return done("local", viewRes[0].Source, viewRes)
	}
	n.touchInterest(q.Capability)
	if !q.LocalOnly {
		// 2. The LAN.
		if n.lan != nil {
			if ok, _ := n.lan.Available(); ok {
				tried = append(tried, "lan")
				began := time.Now()
				lctx, lcancel := context.WithTimeout(ctx, n.cfg.LANTimeout)
				recs, foreign, err := n.lan.Discover(lctx, q.Filter)
				lcancel()
				if err != nil {
					netErr = err
				}
				res := n.learnAll(recs, store.SourceLAN, m, q.Limit)
				for _, a := range foreign {
					n.jrnl.Note(a.AgentID, journal.Verdict{Transport: "lan", Kind: journal.KindEntry, Accepted: true}, nil)
					if (q.Limit == 0 || len(res) < q.Limit) && m.Matches(a) {
						res = append(res, Result{Agent: a, Source: store.SourceLAN})
					}
				}
				tr.step("lan", began, len(res), err, "")
				if len(res) > 0 {
					return done("lan", store.SourceLAN, res)
				}
			}
		}
		// 3. The DHT. A scoped node joined the capability's shard above;
		// the first peers of the shard answer its sync while the DHT is
		// asked (a few round trips), so what they said joins the answer:
		// the DHT returns at most its MaxProviders providers.
		joining := !whole && q.Capability != "" && n.Scoped()
		readyBy := time.Now().Add(shardReadyWait)
		if n.dht != nil && ctx.Err() == nil {
			tried = append(tried, "dht")
			began := time.Now()
			res, err := n.fromDHT(ctx, q, m)
			if err != nil {
				netErr = err
			}
			tr.step("dht", began, len(res), err, "")
			if joining {
				began := time.Now()
				rctx, rcancel := context.WithDeadline(ctx, readyBy)
				before := len(res)
				note := "the capability's shard was joined; its first peers did not answer in time"
				if n.gsp.WaitShardReady(rctx, record.Shard(q.Capability)) {
					res = mergeResults(res, n.fromView(m, 0), q.Limit)
					note = "agents the newly joined shard's peers sent"
				}
				rcancel()
				tr.step("shard", began, len(res)-before, nil, note)
			}
			if len(res) > 0 {
				return done("dht", store.SourceDHT, res)
			}
		}
		if len(viewRes) > 0 {
			return done("local", viewRes[0].Source, viewRes)
		}
		// 4. The SkillCenter catalog. Asked even when the deadline has
		// passed: its cache then answers at once, and what it serves
		// expired (the catalog could not be asked) joins step 5.
		if n.cat != nil {
			tried = append(tried, "skillcenter")
			began := time.Now()
			fresh, stale, err := n.fromCatalog(ctx, q.Filter)
			if err != nil {
				netErr = err
			}
			note := ""
			if len(stale) > 0 {
				note = fmt.Sprintf("%d expired catalog entries kept for the cache step", len(stale))
			}
			tr.step("skillcenter", began, len(fresh), err, note)
			if len(fresh) > 0 {
				return done("skillcenter", store.SourceSkillCenter, limitResults(fresh, q.Limit))
			}
			catStale = stale
		}
	}
	// 5. The cache, including expired entries inside the grace window,
	// then the expired catalog answers.
	tried = append(tried, "cache")
	began = time.Now()
	var cached []Result
	if !n.cfg.NoStaleCache {
		cached = n.fromCache(ctx, q.Filter)
	}
	res := limitResults(append(cached, catStale...), q.Limit)
	tr.step("cache", began, len(res), nil, "")
	if len(res) > 0 {
		return done("cache", store.SourceCache, res)
	}
	n.m.Lookups.WithLabelValues("none", "miss").Inc()
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, &DiscoveryError{Code: record.CodeDiscoveryTimeout, Message: fmt.Sprintf("discovery timed out after %s", timeout), Tried: tried}
	case netErr != nil && len(n.host.Network().Peers()) == 0:
		return nil, &DiscoveryError{Code: record.CodeNetworkError, Message: "no peer reachable: " + netErr.Error(), Tried: tried}
	}
	return nil, &DiscoveryError{Code: record.CodeNoSkillsFound, Message: "no agent matches the query", Tried: tried}
}

func (n *Node) fromView(m *store.Matcher, limit int) []Result {
	now := time.Now()
	var out []Result
	for _, a := range n.view.Query(m, limit) {
		out = append(out, Result{Record: a.Record, Agent: &a.Record.Agent, Source: a.Source, Age: now.Sub(a.LastHeard), Status: a.Status})
	}
	return out
}

// learnAll feeds verified records into the view and returns those matching.
func (n *Node) learnAll(recs []*record.SignedAgent, src store.Source, m *store.Matcher, limit int) []Result {
	var out []Result
	for _, sa := range recs {
		_ = n.view.Learn(sa, src, true)
		if !m.Matches(&sa.Agent) {
			continue
		}
		st := record.StatusHealthy
		if a, ok := n.view.Get(sa.Agent.AgentID); ok {
			st = a.Status
		}
		out = append(out, Result{Record: sa, Agent: &sa.Agent, Source: src, Status: st})
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out
}

func (n *Node) fromDHT(ctx context.Context, q Query, m *store.Matcher) ([]Result, error) {
	if q.Capability == "" && q.Skill == "" {
		if q.AgentID == "" {
			return nil, nil
		}
		sa, err := n.dht.GetRecord(ctx, q.AgentID)
		if err != nil {
			return nil, err
		}
		return n.learnAll([]*record.SignedAgent{sa}, store.SourceDHT, m, q.Limit), nil
	}
	found, err := n.dht.Find(ctx, q.Skill, q.Capability, q.Limit)
	recs := make([]*record.SignedAgent, 0, len(found))
	for _, f := range found {
		recs = append(recs, f.Record)
	}
	return n.learnAll(recs, store.SourceDHT, m, q.Limit), err
}

// fromCatalog asks the SkillCenter step and splits its fresh matches from
// the expired ones its cache served because the catalog could not be
// asked.
func (n *Node) fromCatalog(ctx context.Context, f store.Filter) (fresh, stale []Result, err error) {
	ms, err := n.cat.Resolve(ctx, f)
	for _, m := range ms {
		if !m.Stale {
			// Unsigned: nothing was verified, but the operator asking
			// "where did this agent come from" wants to know.
			n.jrnl.Note(m.Agent.AgentID, journal.Verdict{Transport: "skillcenter", Kind: journal.KindEntry, Accepted: true}, nil)
		}
		r := Result{Agent: m.Agent, Source: store.SourceSkillCenter, Age: m.Age, Stale: m.Stale}
		if m.Stale {
			stale = append(stale, r)
		} else {
			fresh = append(fresh, r)
		}
	}
	return fresh, stale, err
}

// shardReadyWait bounds how long a lookup outside a scoped node's
// interest waits for the newly joined shard's first sync.
const shardReadyWait = 500 * time.Millisecond

// mergeResults appends to res the results of more for agents res does
// not name, up to limit (≤ 0: no limit).
func mergeResults(res, more []Result, limit int) []Result {
	seen := make(map[string]bool, len(res))
	for _, r := range res {
		seen[r.Agent.AgentID] = true
	}
	for _, r := range more {
		if limit > 0 && len(res) >= limit {
			break
		}
		if !seen[r.Agent.AgentID] {
			seen[r.Agent.AgentID] = true
			res = append(res, r)
		}
	}
	return res
}

func limitResults(res []Result, limit int) []Result {
	if limit > 0 && len(res) > limit {
		return res[:limit]
	}
	return res
}

func (n *Node) fromCache(ctx context.Context, f store.Filter) []Result {
	f.IncludeStale = true
	entries, err := n.st.Query(ctx, f)
	if err != nil {
		return nil
	}
	now := time.Now()
	var out []Result
	for _, e := range entries {
		if _, live := n.view.Get(e.Record.Agent.AgentID); live {
			continue
		}
		out = append(out, Result{Record: e.Record, Agent: &e.Record.Agent, Source: store.SourceCache, Age: e.Age(now), Stale: e.Stale})
	}
	return out
}

// GetAgent returns one agent by id: from the live view, the cache, the DHT
// value /agentd/<agent-id>, and last a stale cache entry.
func (n *Node) GetAgent(ctx context.Context, agentID string, allowNetwork bool) (Result, error) {
	if a, ok := n.view.Get(agentID); ok {
		return Result{Record: a.Record, Agent: &a.Record.Agent, Source: a.Source, Age: time.Since(a.LastHeard), Status: a.Status}, nil
	}
	e, cacheErr := n.st.Get(ctx, agentID)
	if cacheErr == nil && !e.Stale {
		return Result{Record: e.Record, Agent: &e.Record.Agent, Source: store.SourceCache, Age: e.Age(time.Now())}, nil
	}
	if allowNetwork && n.dht != nil {
		cctx, cancel := context.WithTimeout(ctx, n.cfg.LookupTimeout)
		sa, err := n.dht.GetRecord(cctx, agentID)
		cancel()
		if err == nil {
			_ = n.view.Learn(sa, store.SourceDHT, false)
			return Result{Record: sa, Agent: &sa.Agent, Source: store.SourceDHT}, nil
		}
	}
	if cacheErr == nil {
		return Result{Record: e.Record, Agent: &e.Record.Agent, Source: store.SourceCache, Age: e.Age(time.Now()), Stale: true}, nil
	}
	return Result{}, &DiscoveryError{Code: record.CodeNoSkillsFound, Message: "agent " + agentID + " is unknown"}
}
