package view

import (
	"cmp"
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/agentd/agentd/record"
	"github.com/google/btree"
)

// textIndex is the live view's inverted index for free-text queries
// (record.MatchesText's rule: every query term is a prefix of a term of
// the record). It maps each term to the records that contain it, in a
// B-tree ordered by term so that a query term finds every term it
// prefixes by one ordered walk.
//
// Why not a search library: the records are short (a name, a description,
// some ids), the index must take an update per record change in
// microseconds under the view's lock, cost a few hundred bytes per record
// and be rebuilt at start in well under a second at 100 000 records; a
// general engine (bleve: analyzers, segment files, a merge loop) costs
// several times that memory and milliseconds per document for features
// the query language here does not have. Ranking is what such an engine
// would do with these fields: a BM25-like weight per term (idf), by the
// field it occurs in (name, then ids and tags, then descriptions), whole
// words above prefixes.
//
// Records are numbered in the order they are indexed; a posting list is a
// slice of doc<<2|class in ascending doc order, so indexing appends. A
// replaced or removed record leaves its number dead in the lists until
// the dead outnumber the live (and 1 024), when every list is rewritten
// with the live records renumbered. A record re-signed with the same text
// (a re-announcement, a new seq) is not indexed again.
//
// It has its own lock: the view updates it while holding the view's
// mutex, and a query searches it without the view's mutex, then looks the
// hits up in the view.
type textIndex struct {
	mu      sync.RWMutex
	dict    *btree.BTreeG[*posting]
	docs    []textDoc // by doc number; rec nil = dead
	byAgent map[string]uint32
	live    int
	// suspended: changes only mark their agents dirty, and search
	// declines (the caller scans), until resume puts in a rebuilt index.
	suspended bool
	dirty     map[string]struct{}
}

type posting struct {
	term string
	refs []uint32 // doc<<2 | class, ascending doc, each doc once (its best class)
}

// textDoc is one indexed record (16 bytes: the agent id is the record's).
type textDoc struct {
	sum uint64              // hash of the record's terms and classes
	rec *record.SignedAgent // the record indexed (or one with the same text); nil once removed
}

// textHit is a search result: the relevance score and the record the
// index holds for the agent.
type textHit struct {
	score float64
	rec   *record.SignedAgent
}

const (
	// maxExpansion is how many index terms one query term may prefix
	// before the index stops expanding it ("a" prefixes a large part of
	// the dictionary): such a term is checked on the other terms' hits
	// instead, or the query falls back to a scan when every term is that
	// broad.
	maxExpansion = 512
	// minDeadToCompact is the least number of dead docs that triggers a
	// rewrite (with the dead also outnumbering the live).
	minDeadToCompact = 1024
	maxDocs          = 1 << 30
)

var textSeed = maphash.MakeSeed()

func newTextIndex() *textIndex {
	return &textIndex{
		dict:    btree.NewG(32, func(a, b *posting) bool { return a.term < b.term }),
		byAgent: map[string]uint32{},
	}
}

// termsOf returns a record's terms with the best class each occurs in, and
// a hash of both.
func termsOf(a *record.Agent) (map[string]uint8, uint64) {
	terms := map[string]uint8{}
	a.TextTerms(func(t string, class uint8) {
		if class > terms[t] {
			terms[t] = class
		}
	})
	keys := make([]string, 0, len(terms))
	for t := range terms {
		keys = append(keys, t)
	}
	slices.Sort(keys)
	var h maphash.Hash
	h.SetSeed(textSeed)
	for _, t := range keys {
		h.WriteString(t)
		h.WriteByte(0)
		h.WriteByte(terms[t])
	}
	return terms, h.Sum64()
}

// update replaces the indexed text of old's agent by new's (either may be
// nil). The view calls it with its mutex held.
func (x *textIndex) update(old, new *record.SignedAgent) {
	if x.markDirty(old, new) {
		return
	}
	if new == nil {
		if old != nil {
			x.mu.Lock()
			x.removeLocked(old.Agent.AgentID)
			x.mu.Unlock()
		}
		return
	}
	terms, sum := termsOf(&new.Agent)
	id := new.Agent.AgentID
	x.mu.Lock()
	defer x.mu.Unlock()
	if old != nil && old.Agent.AgentID != id {
		x.removeLocked(old.Agent.AgentID)
	}
	if n, ok := x.byAgent[id]; ok {
		if x.docs[n].sum == sum {
			x.docs[n].rec = new
			return
		}
		x.removeLocked(id)
	}
	if len(x.docs) >= maxDocs {
		x.compactLocked()
	}
	n := uint32(len(x.docs))
	x.docs = append(x.docs, textDoc{sum: sum, rec: new})
	x.byAgent[id] = n
	x.live++
	probe := &posting{}
	for t, class := range terms {
		probe.term = t
		p, ok := x.dict.Get(probe)
		if !ok {
			// A term may be a slice of the record's packed strings
			// (record's pack): the dictionary keeps its own copy, not the
			// first record's strings for as long as the term is indexed.
			p = &posting{term: strings.Clone(t)}
			x.dict.ReplaceOrInsert(p)
		}
		p.refs = append(p.refs, n<<2|uint32(class))
	}
}

// markDirty records a change while suspended; false when not suspended.
func (x *textIndex) markDirty(old, new *record.SignedAgent) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.suspended {
		return false
	}
	if x.dirty == nil {
		return true // no rebuild has taken its snapshot yet: it will see this change
	}
	for _, sa := range []*record.SignedAgent{old, new} {
		if sa != nil {
			x.dirty[sa.Agent.AgentID] = struct{}{}
		}
	}
	return true
}

// suspend stops indexing (see textIndex.suspended). Changes are not
// recorded until a rebuild takes its snapshot (track): the snapshot holds
// them. Recording the 100 000 registrations of a start, to index them
// again after the rebuild had, cost the start a map of them.
func (x *textIndex) suspend() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.suspended {
		x.suspended, x.dirty = true, nil
	}
}

// track starts recording changes, for resume to apply to a rebuild whose
// snapshot of the records is being taken now. The caller holds the view's
// mutex, so no change falls between the snapshot and the recording.
func (x *textIndex) track() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.suspended {
		x.dirty = map[string]struct{}{}
	}
}

// resume takes fresh, built from the records of the moment the rebuild
// began, as the index, after applying the changes made since: current
// returns an agent's record now (nil when gone). The caller holds the
// view's mutex, so no change runs meanwhile.
func (x *textIndex) resume(fresh *textIndex, current func(agentID string) *record.SignedAgent) {
	x.mu.Lock()
	dirty := x.dirty
	x.mu.Unlock()
	for id := range dirty {
		if sa := current(id); sa != nil {
			fresh.update(nil, sa)
		} else {
			fresh.mu.Lock()
			fresh.removeLocked(id)
			fresh.mu.Unlock()
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.dict, x.docs, x.byAgent, x.live = fresh.dict, fresh.docs, fresh.byAgent, fresh.live
	x.suspended, x.dirty = false, nil
}

func (x *textIndex) removeLocked(agentID string) {
	n, ok := x.byAgent[agentID]
	if !ok {
		return
	}
	delete(x.byAgent, agentID)
	x.docs[n] = textDoc{}
	x.live--
	if dead := len(x.docs) - x.live; dead >= minDeadToCompact && dead > x.live {
		x.compactLocked()
	}
}

// compactLocked drops the dead docs from every posting list and renumbers
// the live ones (order kept, so the lists stay sorted).
func (x *textIndex) compactLocked() {
	renum := make([]uint32, len(x.docs))
	docs := make([]textDoc, 0, x.live)
	for i, d := range x.docs {
		if d.rec == nil {
			continue
		}
		renum[i] = uint32(len(docs))
		x.byAgent[d.rec.Agent.AgentID] = uint32(len(docs))
		docs = append(docs, d)
	}
	var empty []*posting
	x.dict.Ascend(func(p *posting) bool {
		kept := p.refs[:0]
		for _, r := range p.refs {
			if x.docs[r>>2].rec != nil {
				kept = append(kept, renum[r>>2]<<2|r&3)
			}
		}
		if len(kept) == 0 {
			empty = append(empty, p)
		} else if cap(kept) > 2*len(kept)+8 {
			kept = slices.Clip(slices.Clone(kept))
		}
		p.refs = kept
		return true
	})
	for _, p := range empty {
		x.dict.Delete(p)
	}
	x.docs = docs
}

// classWeight is a field class's weight in a hit's score.
var classWeight = [4]float64{0, 1, 2, 3}

// search returns the agents whose indexed text matches q, with their
// relevance scores. ok is false when the index cannot answer (no term in
// q, or every term prefixes more than maxExpansion terms): the caller
// then checks every record. exact says every term was looked up; the
// hits of a query with some broad terms match the others only, and the
// caller checks the rest (record.MatchesText).
func (x *textIndex) search(q string) (hits []textHit, ok, exact bool) {
	want := record.TextTerms(q)
	slices.Sort(want)
	want = slices.Compact(want)
	if len(want) == 0 {
		return nil, false, false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.suspended {
		return nil, false, false
	}
	type expansion struct {
		term  string
		lists []*posting
		refs  int
	}
	var exps []expansion
	for _, t := range want {
		e := expansion{term: t}
		broad := false
		x.dict.AscendGreaterOrEqual(&posting{term: t}, func(p *posting) bool {
			if !strings.HasPrefix(p.term, t) {
				return false
			}
			if len(e.lists) == maxExpansion {
				broad = true
				return false
			}
			e.lists = append(e.lists, p)
			e.refs += len(p.refs)
			return true
		})
		if broad {
			continue
		}
		if len(e.lists) == 0 {
			return []textHit{}, true, true // no record has this term
		}
		exps = append(exps, e)
	}
	if len(exps) == 0 {
		return nil, false, false
	}
	slices.SortFunc(exps, func(a, b expansion) int { return cmp.Compare(a.refs, b.refs) })
	var scores map[uint32]float64
	for i, e := range exps {
		// idf over the live records; refs counts dead and repeated docs
		// too, which only lowers it.
		idf := math.Log(1 + float64(x.live)/float64(max(1, e.refs)))
		term := map[uint32]float64{}
		note := func(r uint32, exact float64) {
			doc := r >> 2
			if x.docs[doc].rec == nil {
				return
			}
			if s := classWeight[r&3] * exact * idf; s > term[doc] {
				term[doc] = s
			}
		}
		for _, p := range e.lists {
			exact := 1.0
			if p.term == e.term {
				exact = 2
			}
			switch {
			case i == 0:
				for _, r := range p.refs {
					note(r, exact)
				}
			case len(scores)*bits.Len(uint(len(p.refs))) < len(p.refs):
				// Few candidates left against a long list: look each up.
				for doc := range scores {
					j, found := slices.BinarySearchFunc(p.refs, doc, func(r, d uint32) int { return cmp.Compare(r>>2, d) })
					if found {
						note(p.refs[j], exact)
					}
				}
			default:
				for _, r := range p.refs {
					if _, in := scores[r>>2]; in {
						note(r, exact)
					}
				}
			}
		}
		if i > 0 {
			for doc, s := range term {
				term[doc] = s + scores[doc]
			}
		}
		scores = term
		if len(scores) == 0 {
			break
		}
	}
	hits = make([]textHit, 0, len(scores))
	for doc, s := range scores {
		hits = append(hits, textHit{score: s, rec: x.docs[doc].rec})
	}
	return hits, true, len(exps) == len(want)
}

// len returns the number of indexed records (for tests).
func (x *textIndex) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live
}
