package store

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

// FuzzDecodeEntry feeds arbitrary bytes to the entry decoder. It must never
// panic, and whatever it accepts must survive encode → decode unchanged
// (header, canonical bytes, both signatures), with the encoding a fixed
// point.
func FuzzDecodeEntry(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{entryFormat, entryKindCache})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, sa, err := decodeEntry(b, false)
		if err != nil {
			return
		}
		ann, err := announceJSON(sa)
		if err != nil {
			t.Fatalf("accepted record does not marshal: %v", err)
		}
		b2 := encodeEntry(h, ann)
		h2, sa2, err := decodeEntry(b2, false)
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if h2 != h {
			t.Fatalf("header changed: %+v -> %+v", h, h2)
		}
		if !bytes.Equal(sa.Canonical(), sa2.Canonical()) || !bytes.Equal(sa.Signature, sa2.Signature) ||
			!bytes.Equal(sa.PeerSignature, sa2.PeerSignature) || sa.ProtocolVersion != sa2.ProtocolVersion {
			t.Fatal("record changed across encode/decode")
		}
		ann2, _ := announceJSON(sa2)
		if !bytes.Equal(encodeEntry(h2, ann2), b2) {
			t.Fatal("encoding is not a fixed point")
		}
	})
}

// FuzzDecodePeer: the address-book decoder never panics and round-trips.
func FuzzDecodePeer(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePeer(b)
		if err != nil {
			return
		}
		b2, err := encodePeer(p)
		if err != nil {
			t.Fatalf("accepted peer does not encode: %v", err)
		}
		p2, err := decodePeer(b2)
		if err != nil {
			t.Fatalf("re-encoded peer does not decode: %v", err)
		}
		if p2.ID != p.ID || !p2.LastSeen.Equal(p.LastSeen) || len(p2.Addrs) != len(p.Addrs) {
			t.Fatalf("peer changed: %+v -> %+v", p, p2)
		}
		for i := range p.Addrs {
			if !p.Addrs[i].Equal(p2.Addrs[i]) {
				t.Fatalf("address %d changed: %v -> %v", i, p.Addrs[i], p2.Addrs[i])
			}
		}
	})
}

// FuzzDecodeTombstone: the tombstone decoder never panics and round-trips.
func FuzzDecodeTombstone(f *testing.F) {
	const id = "5eb1a2c4-6f0e-4d3b-9a51-0c8f2e7d4b19"
	f.Add([]byte(`{"agent_id":"` + id + `","seq":3,"reason":"SHUTDOWN","at":"2026-03-01T12:00:00Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tb, err := decodeTombstone(id, b)
		if err != nil {
			return
		}
		b2, err := encodeTombstone(tb)
		if err != nil {
			t.Fatalf("accepted tombstone does not encode: %v", err)
		}
		tb2, err := decodeTombstone(id, b2)
		if err != nil {
			t.Fatalf("re-encoded tombstone does not decode: %v", err)
		}
		if tb2.AgentID != tb.AgentID || tb2.Seq != tb.Seq || tb2.Reason != tb.Reason || !tb2.At.Equal(tb.At) {
			t.Fatalf("tombstone changed: %+v -> %+v", tb, tb2)
		}
	})
}

// FuzzIndexKey: parseIndexKey never panics, inverts term.key, and what it
// accepts re-encodes to the same bytes.
func FuzzIndexKey(f *testing.F) {
	const id = "5eb1a2c4-6f0e-4d3b-9a51-0c8f2e7d4b19"
	f.Add([]byte("i/c/search\x00"+id), byte('g'), "prod")
	f.Fuzz(func(t *testing.T, k []byte, kind byte, val string) {
		if tm, aid, ok := parseIndexKey(k); ok {
			if got := tm.key(aid); !bytes.Equal(got, k) {
				t.Fatalf("parse/format: %q -> %q", k, got)
			}
		}
		if bytes.IndexByte([]byte(val), termSep) >= 0 {
			return // terms never hold NUL (record.Validate)
		}
		tm := term{kind: kind, val: val}
		got, aid, ok := parseIndexKey(tm.key(id))
		if !ok || got != tm || aid != id {
			t.Fatalf("format/parse of %+v: %+v %q %v", tm, got, aid, ok)
		}
	})
}

// TestEntryGolden pins the entry header layout.
func TestEntryGolden(t *testing.T) {
	h := entryHeader{kind: entryKindCache, received: time.Unix(0, 0x0102030405060708).UTC(), expires: time.Unix(0, 0x1112131415161718).UTC(), source: SourceDHT}
	got := encodeEntry(h, []byte(`{}`))
	want := []byte{1, 'c', 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 3, 'd', 'h', 't', '{', '}'}
	if !bytes.Equal(got, want) {
		t.Fatalf("entry bytes\n got %v\nwant %v", got, want)
	}
	sa := mkRecord(t, agentSpec{})
	b := encodeEntry(h, sa.MarshalAnnounce())
	h2, sa2, err := decodeEntryFor(sa.Agent.AgentID, entryKindCache, b, false)
	if err != nil || h2 != h || !bytes.Equal(sa2.Canonical(), sa.Canonical()) {
		t.Fatalf("decode: %+v %v", h2, err)
	}
	// Without share, the record holds a copy of its agent object, not b
	// (a cache entry would keep the whole entry alive); with, b itself.
	for _, share := range []bool{false, true} {
		b := slices.Clone(b)
		_, sa3, err := decodeEntryFor(sa.Agent.AgentID, entryKindCache, b, share)
		if err != nil {
			t.Fatal(err)
		}
		clear(b)
		if got := bytes.Equal(sa3.Canonical(), sa.Canonical()); got == share {
			t.Fatalf("share %v: clearing the entry changed the record's bytes: %v", share, !got)
		}
	}
	for i := range b[:entryHeaderLen+3] {
		// Every truncation is refused, never a panic.
		if _, _, err := decodeEntry(b[:i], false); err == nil {
			t.Fatalf("truncated at %d accepted", i)
		}
	}
}

// TestAnnounceJSONMatchesMarshalAnnounce: the store's Announce encoder
// writes what record.MarshalAnnounce writes (byte for byte when no string
// needs HTML escaping) and reads back to the same record either way.
func TestAnnounceJSONMatchesMarshalAnnounce(t *testing.T) {
	plain := mkRecord(t, agentSpec{})
	got, err := announceJSON(plain)
	if err != nil {
		t.Fatal(err)
	}
	if want := plain.MarshalAnnounce(); !bytes.Equal(got, want) {
		t.Fatalf("announce JSON\n got %s\nwant %s", got, want)
	}
	html := mkRecord(t, agentSpec{tags: []string{"<b>&amp;</b>"}})
	got, err = announceJSON(html)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := record.ParseAnnounce(got)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := record.ParseAnnounce(html.MarshalAnnounce())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Canonical(), b.Canonical()) || !bytes.Equal(a.Canonical(), html.Canonical()) ||
		!bytes.Equal(a.Signature, b.Signature) || !bytes.Equal(a.PeerSignature, b.PeerSignature) {
		t.Fatal("the two encodings read back differently")
	}
	if err := a.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseStored: the store's own reader of the layout it writes agrees
// with the general reader: whatever it accepts, record.ParseStoredAnnounce
// accepts as the same record; and what announceJSON writes it reads
// without falling back.
func FuzzParseStored(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"1.0","agent":{"a":"}\"{"},"signature":"AA==","peer_signature":"AQ=="}`))
	f.Add([]byte(`{"protocol_version":"1.0","agent":{}}`))
	if ann, err := announceJSON(mkRecord(f, agentSpec{issued: time.Now()})); err == nil {
		f.Add(ann)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, _, _, _, ok := splitStored(b); !ok {
			return
		}
		fast, err := parseStored(b, false)
		slow, err2 := record.ParseStoredAnnounce(b)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("fast path: %v, general: %v\n%q", err, err2, b)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(fast.Canonical(), slow.Canonical()) || !bytes.Equal(fast.Signature, slow.Signature) ||
			!bytes.Equal(fast.PeerSignature, slow.PeerSignature) || fast.ProtocolVersion != slow.ProtocolVersion {
			t.Fatalf("the two readers disagree on %q", b)
		}
		ann, err := announceJSON(fast)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, _, ok := splitStored(ann); !ok {
			t.Fatalf("announceJSON's own output %q is not read by the fast path", ann)
		}
	})
}
