package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/agentd/agentd/record"
)

// maxFilterTerm bounds the strings of a Filter that become index keys.
const maxFilterTerm = record.MaxIDLen

// Query returns the cached entries matching f (see Filter and Matcher):
// fresh ones first, then, with IncludeStale, stale ones inside their grace
// window, each group ordered by agent id, at most Limit in all (0: no
// limit).
//
// Candidates come from the most selective Badger index the filter names
// (an agent id is a direct lookup; capability, skill, scene, type, each
// tag and tenant are posting lists whose sizes the store counts), or from a
// scan of the cache when it names none; every filter is then checked on
// the record itself.
func (s *db) Query(ctx context.Context, f Filter) ([]Entry, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := checkFilter(f); err != nil {
		return nil, err
	}
	m, err := f.Compile()
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()

	ids, err := s.candidates(ctx, f)
	if err != nil {
		return nil, err
	}
	var fresh, stale []Entry
	s.mu.RLock()
	cs := make([]*centry, 0, len(ids))
	for _, id := range ids {
		if c := s.entries[id]; c != nil {
			cs = append(cs, c)
		}
	}
	s.mu.RUnlock()
	for i, c := range cs {
		if i%256 == 255 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !now.Before(s.dropAt(c)) || !m.SourceAllowed(c.source) {
			continue
		}
		isFresh := now.Before(c.expires)
		if !isFresh && !f.IncludeStale {
			continue
		}
		if f.Limit > 0 && len(fresh) >= f.Limit {
			break // candidates are in id order: fresh results are complete
		}
		if !m.Matches(&c.rec.Agent) {
			continue
		}
		if isFresh {
			fresh = append(fresh, c.entry(now))
		} else {
			stale = append(stale, c.entry(now))
		}
	}
	out := append(fresh, stale...)
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// candidates returns the ids, sorted, that may match f.
func (s *db) candidates(ctx context.Context, f Filter) ([]string, error) {
	if f.AgentID != "" {
		return []string{f.AgentID}, nil
	}
	var terms []term
	add := func(k byte, v string) {
		if v != "" {
			terms = append(terms, term{k, v})
		}
	}
	add(kindCapability, f.Capability)
	add(kindSkill, f.Skill)
	add(kindScene, f.Scene)
	add(kindType, f.Type)
	for _, t := range f.Tags {
		add(kindTag, t)
	}
	add(kindTenant, f.Tenant)

	var ids []string
	if len(terms) == 0 {
		err := s.scan(ctx, []byte(spaceCache), false, func(k, _ []byte) error {
			ids = append(ids, string(k[len(spaceCache):]))
			return nil
		})
		return ids, err
	}
	s.mu.RLock()
	best, bestN := terms[0], s.counts[terms[0].count()]
	for _, t := range terms[1:] {
		if n := s.counts[t.count()]; n < bestN {
			best, bestN = t, n
		}
	}
	s.mu.RUnlock()
	if bestN == 0 {
		return nil, nil
	}
	ids = make([]string, 0, bestN)
	p := best.prefix()
	err := s.scan(ctx, p, false, func(k, _ []byte) error {
		if id := k[len(p):]; len(id) == agentIDLen {
			ids = append(ids, string(id))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Posting keys of one term are in id order already.
	if !slices.IsSorted(ids) {
		slices.Sort(ids)
	}
	return ids, nil
}

// checkFilter refuses filter strings that cannot be identifiers or tags:
// over-long, invalid UTF-8, or holding control characters (NUL separates
// index terms from agent ids).
func checkFilter(f Filter) error {
	check := func(field, v string) error {
		if len(v) > maxFilterTerm || !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return &record.FieldError{Field: field, Reason: fmt.Sprintf("must be at most %d printable bytes", maxFilterTerm)}
		}
		return nil
	}
	for _, p := range []struct{ field, v string }{
		{"agent_id", f.AgentID}, {"capability", f.Capability}, {"skill", f.Skill},
		{"scene", f.Scene}, {"type", f.Type}, {"tenant", f.Tenant},
	} {
		if err := check(p.field, p.v); err != nil {
			return err
		}
	}
	if len(f.Tags) > record.MaxTags {
		return &record.FieldError{Field: "tags", Reason: fmt.Sprintf("has %d tags, more than %d", len(f.Tags), record.MaxTags)}
	}
	for i, t := range f.Tags {
		if err := check(fmt.Sprintf("tags[%d]", i), t); err != nil {
			return err
		}
	}
	if len(f.Version) > record.MaxShortTextLen {
		return &record.FieldError{Field: "version", Reason: fmt.Sprintf("is longer than %d bytes", record.MaxShortTextLen)}
	}
	if len(f.Text) > record.MaxShortTextLen {
		return &record.FieldError{Field: "text", Reason: fmt.Sprintf("is longer than %d bytes", record.MaxShortTextLen)}
	}
	if f.Limit < 0 {
		return &record.FieldError{Field: "limit", Reason: "must not be negative"}
	}
	return nil
}
