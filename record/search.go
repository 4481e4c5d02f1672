package record

import (
	"strings"
	"unicode"
)

// Free-text search (the REST q parameter, JSON-RPC text_search, the
// WebSocket query's text) matches words, not substrings. A record's
// searchable text is its name, description and tags, its capability ids,
// its skills' ids and its capabilities' descriptions; TextTerms cuts it
// into terms (lowercase runs of letters and digits). A query matches when
// every one of its terms is a prefix of some term of the record — "image
// manip" finds "Image manipulation", "product.search" finds the
// capability product.search — or when the whole query is the agent id.
// The live view answers such queries from an inverted index over these
// terms (view/text.go); MatchesText is the same rule for one record.

// Text classes: where a term occurs, for ranking. A higher class is a
// stronger sign of relevance.
const (
	TextDescription uint8 = 1 // the agent's or a capability's description
	TextKeyword     uint8 = 2 // tags, capability ids, skill ids
	TextName        uint8 = 3 // the agent's name
)

// TextTerms returns the terms of s in order: its maximal runs of letters
// and digits, lowercased. Repeated terms are kept.
func TextTerms(s string) []string {
	var out []string
	forEachTerm(s, func(t string) { out = append(out, t) })
	return out
}

func isTermRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

func forEachTerm(s string, fn func(string)) {
	start := -1
	for i, r := range s {
		if isTermRune(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			fn(strings.ToLower(s[start:i]))
			start = -1
		}
	}
	if start >= 0 {
		fn(strings.ToLower(s[start:]))
	}
}

// TextTerms calls fn for every term of the agent's searchable text with
// the class of the field it occurs in (a term may be reported more than
// once).
func (a *Agent) TextTerms(fn func(term string, class uint8)) {
	in := func(s string, class uint8) { forEachTerm(s, func(t string) { fn(t, class) }) }
	in(a.AgentName, TextName)
	in(a.Description, TextDescription)
	for _, t := range a.Tags {
		in(t, TextKeyword)
	}
	for k := range a.Capabilities {
		in(k, TextKeyword)
	}
	for _, s := range a.Skills {
		in(s.SkillID, TextKeyword)
		for _, c := range s.Capabilities {
			in(c.ID, TextKeyword)
			in(c.Description, TextDescription)
		}
	}
}

// MatchesText reports whether the agent matches the free-text query q:
// every term of q is a prefix of a term of the agent's searchable text, or
// q (trimmed) is the agent id. A query without terms matches every agent.
func (a *Agent) MatchesText(q string) bool {
	q = strings.TrimSpace(q)
	if q == "" || q == a.AgentID {
		return true
	}
	want := TextTerms(q)
	if len(want) == 0 {
		return true
	}
	found := make([]bool, len(want))
	left := len(want)
	a.TextTerms(func(term string, _ uint8) {
		if left == 0 {
			return
		}
		for i, w := range want {
			if !found[i] && strings.HasPrefix(term, w) {
				found[i] = true
				left--
			}
		}
	})
	return left == 0
}
