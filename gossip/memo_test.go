package gossip

import (
	"encoding/json"
	"strings"
	"testing"
)

// goldenRecord is the announcement of testdata/announce.json, as a sync
// answer carries it.
func goldenRecord(t *testing.T) string {
	t.Helper()
	var env struct {
		Announce json.RawMessage `json:"announce"`
	}
	if err := json.Unmarshal(readGolden(t, "announce.json"), &env); err != nil {
		t.Fatal(err)
	}
	return string(env.Announce)
}

// TestRecordMemo: the same bytes in another answer are the record decoded
// the first time, not decoded again; bytes that do not decode are not
// kept; the memo forgets after two generations, by count and by bytes.
func TestRecordMemo(t *testing.T) {
	rec := goldenRecord(t)
	m := newRecordMemo()
	first, err := m.decode([]byte(rec))
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.decode([]byte(rec))
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatal("the same bytes were decoded again")
	}
	if fresh, err := decodeAnnounce([]byte(rec)); err != nil || fresh.Hash() != first.Hash() {
		t.Fatalf("memo's record %x, decoded %v %v", first.Hash(), fresh, err)
	}

	bad := []byte(strings.Replace(rec, `"agent":`, `"AGENT":`, 1))
	for range 2 {
		if _, err := m.decode(bad); err == nil {
			t.Fatal("a record that does not decode was accepted")
		}
	}
	if len(m.cur)+len(m.old) != 1 {
		t.Fatalf("memo holds %d records, want 1 (failures are not kept)", len(m.cur)+len(m.old))
	}

	// Other bytes of the same record (leading blanks): one generation
	// later the first is still known, two generations later it is not.
	variant := func(i int) []byte { return []byte(strings.Repeat(" ", i) + rec) }
	for i := 1; i < syncMemoGeneration; i++ {
		if _, err := m.decode(variant(i)); err != nil {
			t.Fatal(err)
		}
	}
	if sa, _ := m.decode([]byte(rec)); sa != first {
		t.Fatal("forgotten within a generation")
	}
	for i := syncMemoGeneration; i <= 2*syncMemoGeneration; i++ {
		if _, err := m.decode(variant(i)); err != nil {
			t.Fatal(err)
		}
	}
	if sa, _ := m.decode([]byte(rec)); sa == first {
		t.Fatal("still known after two generations")
	}

	// Large records end a generation before its count does.
	m = newRecordMemo()
	big := len(rec) + 4096
	padded := func(i int) []byte { return []byte(strings.Repeat(" ", big-len(rec)+i) + rec) }
	n := syncMemoBytes / big
	for i := range 2*n + 2 {
		if _, err := m.decode(padded(i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.cur)+len(m.old) > 2*n {
		t.Fatalf("memo holds %d records of %d bytes, want at most %d", len(m.cur)+len(m.old), big, 2*n)
	}
	var nilMemo *recordMemo
	if a, err := nilMemo.decode([]byte(rec)); err != nil || a == first {
		t.Fatalf("a nil memo decodes: %v %v", a, err)
	}
}
