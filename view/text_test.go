package view

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

// textAgent is an unsigned record with searchable text: the view's text
// index reads only the agent fields.
func textAgent(id, name, desc string, tags []string, caps ...string) *record.SignedAgent {
	sk := record.Skill{SkillID: "skill-" + id, Version: "1.0.0", SkillType: record.SkillTool}
	for _, c := range caps {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c, Version: "1.0.0", Description: "does " + c})
	}
	return &record.SignedAgent{Agent: record.Agent{AgentID: id, AgentName: name, Description: desc, Tags: tags,
		PeerID: "peer-" + id, Skills: []record.Skill{sk}}}
}

// scanIDs is the answer without the index: every record checked with
// record.MatchesText.
func scanIDs(recs map[string]*record.SignedAgent, q string) []string {
	var out []string
	for id, sa := range recs {
		if sa.Agent.MatchesText(q) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func queryIDs(t *testing.T, v *View, q string) []string {
	t.Helper()
	m, err := store.Filter{Text: q}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range v.Query(m, 0) {
		out = append(out, a.Record.Agent.AgentID)
	}
	slices.Sort(out)
	return out
}

var words = strings.Fields(`image manipulation resize crop translate speech text vision ocr
	search product catalog order payment refund invoice ledger audit report chart plot
	weather forecast map route geocode email calendar meeting schedule summarize classify`)

// TestTextIndexAgreesWithScan: through every kind of change (add, replace
// with new text, re-sign with the same text, remove, enough churn to
// compact), the index answers exactly what a scan with MatchesText does.
func TestTextIndexAgreesWithScan(t *testing.T) {
	f := newFixture(t)
	rng := rand.New(rand.NewPCG(1, 2))
	phrase := func(n int) string {
		var ws []string
		for range n {
			w := words[rng.IntN(len(words))]
			if rng.IntN(4) == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			ws = append(ws, w)
		}
		return strings.Join(ws, " ")
	}
	recs := map[string]*record.SignedAgent{}
	put := func(id string) {
		sa := textAgent(id, phrase(2), phrase(6), []string{words[rng.IntN(len(words))]},
			"cap."+words[rng.IntN(len(words))], words[rng.IntN(len(words))]+"-"+words[rng.IntN(len(words))])
		recs[id] = sa
		f.v.ApplyLocal(sa)
	}
	queries := []string{"image", "IMAGE manip", "manip image", "product.search", "cap.weather", "does", "re", "e",
		"summarize report", "zzz", "skill-a7", "a12", "  ", "ledger-audit", "pay ref inv", "ocr ocr"}
	check := func(stage string) {
		t.Helper()
		for _, q := range queries {
			if got, want := queryIDs(t, f.v, q), scanIDs(recs, q); !slices.Equal(got, want) {
				t.Fatalf("%s: q=%q: index answered %d agents %v, a scan %d %v", stage, q, len(got), head(got), len(want), head(want))
			}
		}
	}
	for i := range 300 {
		put(fmt.Sprintf("a%d", i))
	}
	check("added")
	for i := range 300 {
		if i%3 == 0 {
			put(fmt.Sprintf("a%d", i)) // new text
		}
	}
	check("replaced")
	for i := 0; i < 300; i += 2 {
		id := fmt.Sprintf("a%d", i)
		f.v.RemoveLocal(id, record.ReasonShutdown)
		delete(recs, id)
	}
	check("removed")
	// Churn past the compaction threshold.
	for round := range 12 {
		for i := range 300 {
			put(fmt.Sprintf("b%d", i))
		}
		if round%2 == 0 {
			for i := range 150 {
				id := fmt.Sprintf("b%d", i)
				f.v.RemoveLocal(id, record.ReasonShutdown)
				delete(recs, id)
			}
		}
	}
	check("churned")
	x := f.v.proj.text
	x.mu.RLock()
	docs, live := len(x.docs), x.live
	x.mu.RUnlock()
	if live != len(recs) {
		t.Fatalf("index holds %d live records, the view %d", live, len(recs))
	}
	if dead := docs - live; dead > max(minDeadToCompact, live) {
		t.Fatalf("%d dead docs kept beside %d live: compaction did not run", dead, live)
	}
}

// TestTextIndexRebuiltInTheBackground: with the index deferred (a
// restart's bulk load), text queries scan and answer the same; the rebuild
// keeps every change made while it ran.
func TestTextIndexRebuiltInTheBackground(t *testing.T) {
	f := newFixture(t)
	recs := map[string]*record.SignedAgent{}
	put := func(id, name string) {
		sa := textAgent(id, name, "a tool", nil, "cap.x")
		recs[id] = sa
		f.v.ApplyLocal(sa)
	}
	f.v.DeferTextIndex()
	for i := range 3000 {
		put(fmt.Sprintf("d%d", i), fmt.Sprintf("name%d alpha", i%7))
	}
	check := func(stage string) {
		t.Helper()
		for _, q := range []string{"alpha", "name3", "beta", "name3 alpha", "gamma"} {
			if got, want := queryIDs(t, f.v, q), scanIDs(recs, q); !slices.Equal(got, want) {
				t.Fatalf("%s: q=%q: %d agents, a scan %d", stage, q, len(got), len(want))
			}
		}
	}
	check("deferred")
	f.v.ResumeTextIndex()
	// Changes while the rebuild runs.
	for i := range 200 {
		put(fmt.Sprintf("d%d", i), "renamed beta")
		put(fmt.Sprintf("n%d", i), "new gamma")
		id := fmt.Sprintf("d%d", 1000+i)
		f.v.RemoveLocal(id, record.ReasonShutdown)
		delete(recs, id)
	}
	f.v.textWG.Wait()
	if _, ok, _ := f.v.proj.text.search("alpha"); !ok {
		t.Fatal("the index is not back in service")
	}
	check("rebuilt")
	if got := f.v.proj.text.len(); got != len(recs) {
		t.Fatalf("index holds %d records, the view %d", got, len(recs))
	}
}

func head(s []string) []string { return s[:min(len(s), 8)] }

// TestTextIndexSameTextNotReindexed: a re-signed record with the same text
// keeps its doc; a changed one gets a new doc and the old text is gone.
func TestTextIndexSameTextNotReindexed(t *testing.T) {
	x := newTextIndex()
	a := textAgent("x", "Image Resizer", "resizes images", nil, "image.resize")
	x.update(nil, a)
	again := textAgent("x", "Image Resizer", "resizes images", nil, "image.resize")
	again.Agent.Seq = 2
	x.update(a, again)
	if len(x.docs) != 1 {
		t.Fatalf("re-signing with the same text added a doc: %d docs", len(x.docs))
	}
	changed := textAgent("x", "Speech Engine", "speaks", nil, "speech.tts")
	x.update(again, changed)
	if hits, ok, _ := x.search("resizer"); !ok || len(hits) != 0 {
		t.Fatalf("old text still found: %v %v", hits, ok)
	}
	if hits, ok, _ := x.search("speech"); !ok || len(hits) != 1 {
		t.Fatalf("new text not found: %v %v", hits, ok)
	}
	x.update(changed, nil)
	if x.len() != 0 {
		t.Fatalf("%d docs after removal", x.len())
	}
}

// TestTextRanking: a whole word in the name ranks above a whole word in
// the tags, which ranks above the description; a whole word above a
// prefix; a rare term weighs more than a common one.
func TestTextRanking(t *testing.T) {
	f := newFixture(t)
	f.v.ApplyLocal(textAgent("desc", "Helper", "an image tool", nil, "misc.a"))
	f.v.ApplyLocal(textAgent("tag", "Helper", "a tool", []string{"image"}, "misc.b"))
	f.v.ApplyLocal(textAgent("name", "Image", "a tool", nil, "misc.c"))
	f.v.ApplyLocal(textAgent("prefix", "Imagery", "a tool", nil, "misc.d"))
	for i := range 20 {
		f.v.ApplyLocal(textAgent(fmt.Sprintf("filler%d", i), "Tool", "a tool", nil, "misc.e"))
	}
	m, err := store.Filter{Text: "image"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range f.v.Query(m, 0) {
		got = append(got, a.Record.Agent.AgentID)
	}
	// name (3×2), prefix in the name (3×1) and tag (2×2) tie on 6 vs 4…:
	// whole name word 6, tag word 4, name prefix 3, description word 2.
	if want := []string{"name", "tag", "prefix", "desc"}; !slices.Equal(got, want) {
		t.Fatalf("ranking %v, want %v", got, want)
	}
	// Two terms: both must match, and the rarer one decides.
	f.v.ApplyLocal(textAgent("both", "Image Tool", "", nil, "misc.f"))
	m, _ = store.Filter{Text: "tool image"}.Compile()
	res := f.v.Query(m, 0)
	if len(res) == 0 || res[0].Record.Agent.AgentID != "both" {
		t.Fatalf("tool image: %v", res)
	}
	// The agent id as the whole query.
	m, _ = store.Filter{Text: "filler7"}.Compile()
	if res := f.v.Query(m, 0); len(res) != 1 || res[0].Record.Agent.AgentID != "filler7" {
		t.Fatalf("agent id query: %v", res)
	}
}

// TestTextBroadTermsFallBack: a term that prefixes more than maxExpansion
// index terms is not expanded; the answer is still exact.
func TestTextBroadTermsFallBack(t *testing.T) {
	f := newFixture(t)
	recs := map[string]*record.SignedAgent{}
	for i := range maxExpansion + 50 {
		id := fmt.Sprintf("w%d", i)
		sa := textAgent(id, fmt.Sprintf("word%dx", i), "common", nil, "misc.cap")
		if i%100 == 0 {
			sa.Agent.Description = "common rare"
		}
		recs[id] = sa
		f.v.ApplyLocal(sa)
	}
	if _, ok, _ := f.v.proj.text.search("word"); ok {
		t.Fatal("a term prefixing every name was expanded")
	}
	for _, q := range []string{"word", "word rare", "rare word", "word1", "word12x"} {
		if got, want := queryIDs(t, f.v, q), scanIDs(recs, q); !slices.Equal(got, want) {
			t.Fatalf("q=%q: %v, scan %v", q, head(got), head(want))
		}
	}
}

// FuzzTextIndex: for any record text and query, the index finds the record
// exactly when record.MatchesText says it matches.
func FuzzTextIndex(f *testing.F) {
	f.Add("Image Resizer", "resizes images fast", "image.resize", "imag res")
	f.Add("Ünïcode Ågent", "naïve café", "cap.é", "CAFÉ")
	f.Add("a-b_c.d", "x/y", "1.2.3", "b c")
	f.Add("", "", "z", "")
	f.Fuzz(func(t *testing.T, name, desc, capID, q string) {
		x := newTextIndex()
		sa := textAgent("id", name, desc, []string{desc}, capID)
		x.update(nil, sa)
		hits, ok, _ := x.search(q)
		if !ok {
			return // the caller scans
		}
		found := slices.ContainsFunc(hits, func(h textHit) bool { return h.rec.Agent.AgentID == "id" })
		if want := sa.Agent.MatchesText(q) && strings.TrimSpace(q) != "id"; found != want {
			t.Fatalf("q=%q on %q/%q/%q: index %v, MatchesText %v", q, name, desc, capID, found, want)
		}
	})
}

// BenchmarkTextQuery is a free-text query against a view of N records
// drawn from a 5 000-word vocabulary (random words of 4 to 9 letters): one
// word ("word", in 9 N / 5 000 records), two whole words ("words"), or a
// word and the first 4 letters of another, as a search box sends while
// one types ("prefix"). Each answer is limited to 100. The figures are in
// docs/performance.md.
func BenchmarkTextQuery(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		st, err := store.Open(store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		v := New(Config{}, st, nil, nil, nil)
		rng := rand.New(rand.NewPCG(3, 4))
		vocab := make([]string, 5000)
		for i := range vocab {
			w := make([]byte, 4+rng.IntN(6))
			for j := range w {
				w[j] = byte('a' + rng.IntN(26))
			}
			vocab[i] = string(w)
		}
		pick := func() string { return vocab[rng.IntN(len(vocab))] }
		for i := range n {
			v.ApplyLocal(textAgent(fmt.Sprintf("agent-%d", i), pick()+" "+pick(),
				strings.Join([]string{pick(), pick(), pick(), pick(), pick(), pick()}, " "),
				[]string{pick()}, "cap."+pick()))
		}
		for _, kind := range []string{"word", "words", "prefix"} {
			ms := make([]*store.Matcher, 64)
			for i := range ms {
				q := pick() + " " + pick()
				switch kind {
				case "word":
					q = pick()
				case "prefix":
					q = pick() + " " + pick()[:4]
				}
				if ms[i], err = (store.Filter{Text: q}).Compile(); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(fmt.Sprintf("records=%d/%s", n, kind), func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					v.Query(ms[i%len(ms)], 100)
				}
			})
		}
		_ = v.Close()
		_ = st.Close()
	}
}

// TestTextIndexTermsOwnTheirBytes: a term cut from a record's text (a
// lowercase word is a slice of it) is copied into the dictionary, so the
// index does not keep a replaced record's strings alive.
func TestTextIndexTermsOwnTheirBytes(t *testing.T) {
	x := newTextIndex()
	desc := strings.Repeat("x", 64) + " zeppelin"
	x.update(nil, textAgent("a1", "n", desc, nil))
	p, ok := x.dict.Get(&posting{term: "zeppelin"})
	if !ok {
		t.Fatal("the term is not indexed")
	}
	start := uintptr(unsafe.Pointer(unsafe.StringData(desc)))
	if at := uintptr(unsafe.Pointer(unsafe.StringData(p.term))); at >= start && at < start+uintptr(len(desc)) {
		t.Fatal("the dictionary's term is a slice of the record's description")
	}
}
