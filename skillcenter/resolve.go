package skillcenter

import (
	"context"
	"slices"
	"strings"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

// Resolve answers a resolver query from the catalog; it is the resolver's
// SkillCenter step (node.Catalog). The filter becomes the cheapest request
// that can answer it — GET /api/skills/{id} for a skill id, POST
// /api/skills/search for capability, scene, type, text (one keyword) and
// version, GET /api/skills otherwise — and every skill of the answer is
// mapped to an agent (Skill.Agent) and checked against the whole filter
// (store.Matcher), so the catalog's own matching only has to be a
// superset.
//
// When the catalog cannot be asked, Resolve answers from the cache, every
// match marked Stale: the expired answer to the same request if there is
// one, else every cached skill that matches. It returns an error only when
// it has nothing to answer with and the catalog failed; a catalog that
// answers "nothing" is (nil, nil).
func (c *Client) Resolve(ctx context.Context, f store.Filter) ([]Match, error) {
	m, err := f.Compile()
	if err != nil {
		return nil, err
	}
	if f.Tenant != "" || (f.Type != "" && !record.SkillType(f.Type).Valid()) {
		return nil, nil // no catalog entry has a tenant or another type
	}
	var ans Answer[SkillList]
	switch {
	case f.Skill != "":
		if !ValidID(f.Skill) {
			return nil, nil
		}
		a, gerr := c.Get(ctx, f.Skill)
		if IsNotFound(gerr) {
			return nil, nil
		}
		err = gerr
		if gerr == nil {
			ans = Answer[SkillList]{Value: SkillList{Total: 1, Skills: []Skill{a.Value}}, FetchedAt: a.FetchedAt, Cached: a.Cached, Stale: a.Stale, Cause: a.Cause}
		}
	case f.Capability != "" || f.Scene != "" || f.Type != "" || f.Text != "" || f.Version != "":
		req, ok := searchFor(f)
		if !ok {
			return nil, nil
		}
		ans, err = c.Search(ctx, req)
	default:
		ans, err = c.List(ctx)
	}
	if err != nil {
		if !unreachable(err) {
			return nil, err
		}
		if ms := c.staleMatches(m, f.Limit); len(ms) > 0 {
			c.log.Debug("skillcenter unavailable; answering from expired cache entries", "matches", len(ms), "err", err)
			return ms, nil
		}
		return nil, err
	}
	return c.matches(ans, m, f.Limit), nil
}

// searchFor maps a filter to a §7.2 request; ok is false when no catalog
// entry can match it (an identifier field that is not an identifier).
func searchFor(f store.Filter) (SearchRequest, bool) {
	var req SearchRequest
	if f.Capability != "" {
		if !record.ValidIdent(f.Capability) {
			return req, false
		}
		req.Capabilities = []string{f.Capability}
	}
	if f.Scene != "" {
		if !record.ValidIdent(f.Scene) {
			return req, false
		}
		req.Scenes = []string{f.Scene}
	}
	if f.Type != "" {
		req.Types = []string{f.Type}
	}
	// The text filter is checked on the mapped agent in any case; it is
	// sent as a keyword only when it is one.
	if t := strings.TrimSpace(f.Text); t != "" && len(t) <= record.MaxIDLen && record.Printable(t) {
		req.Keywords = []string{t}
	}
	req.Version = f.Version
	return req, true
}

// matches maps an answer to the matches of m, at most limit (0: all).
func (c *Client) matches(ans Answer[SkillList], m *store.Matcher, limit int) []Match {
	age := max(c.o.Now().Sub(ans.FetchedAt), 0)
	var out []Match
	seen := map[string]bool{}
	for i := range ans.Value.Skills {
		s := &ans.Value.Skills[i]
		if seen[s.ID] {
			continue
		}
		a, err := s.Agent(c.base.String())
		if err != nil {
			c.log.Debug("catalog skill skipped", "skill", trunc(s.ID), "err", err)
			continue
		}
		if !m.Matches(a) {
			continue
		}
		seen[s.ID] = true
		out = append(out, Match{Agent: a, Skill: *s, Stale: ans.Stale, Age: age})
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out
}

// staleMatches answers from every cached skill (the catalog failed): all
// marked Stale, ordered by skill id.
func (c *Client) staleMatches(m *store.Matcher, limit int) []Match {
	now := c.o.Now()
	all := c.cache.all(now)
	slices.SortFunc(all, func(a, b cachedSkill) int { return strings.Compare(a.skill.ID, b.skill.ID) })
	var out []Match
	for _, cs := range all {
		a, err := cs.skill.Agent(c.base.String())
		if err != nil || !m.Matches(a) {
			continue
		}
		out = append(out, Match{Agent: a, Skill: cs.skill, Stale: true, Age: max(now.Sub(cs.fetched), 0)})
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	return out
}
