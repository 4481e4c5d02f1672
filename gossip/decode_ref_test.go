package gossip

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/go-json-experiment/json/jsontext"
)

// decodeReference is Decode as it was before readEnvelope: the whole
// message canonicalized as a check, then decoded four more times, member
// names read through maps (referenceMembers). It is kept as the oracle
// FuzzDecodeMatchesReference compares Decode with, for what readEnvelope
// replaced; the last step, decodeBody, is shared (its member check,
// exactMembers, has its own oracle in FuzzExactMembers).
func decodeReference(b []byte, maxBytes int) (*Message, error) {
	if maxBytes <= 0 {
		maxBytes = record.MaxMessageBytes
	}
	if len(b) > maxBytes {
		return nil, fmt.Errorf("%w: message is %d bytes, limit %d", record.ErrTooLarge, len(b), maxBytes)
	}
	if _, err := record.CanonicalizeJSON(b); err != nil {
		return nil, err
	}
	version, newer, err := referenceVersion(b)
	if err != nil {
		return nil, err
	}
	if err := referenceMembers(b, "", envelopeMembers); err != nil {
		return nil, err
	}
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, &record.FieldError{Field: "message", Reason: err.Error()}
	}
	var raw struct {
		Announce json.RawMessage   `json:"announce"`
		Beat     json.RawMessage   `json:"beat"`
		Beats    []json.RawMessage `json:"beats"`
		Wanted   json.RawMessage   `json:"wanted"`
	}
	_ = json.Unmarshal(b, &raw) // the same text decoded above
	// The envelope's members as Decode's last step takes them: present
	// when neither absent nor null (for beats only the presence counts;
	// its entries are raw.Beats).
	r := rawEnvelope{beatList: raw.Beats}
	if e.Announce != nil {
		r.announce = jsontext.Value(raw.Announce)
	}
	if e.Beat != nil {
		r.beat = jsontext.Value(raw.Beat)
	}
	if e.Beats != nil {
		r.beats = jsontext.Value("[]")
	}
	if e.Wanted != nil {
		r.wanted = jsontext.Value(raw.Wanted)
	}
	return decodeBody(version, newer, &e, &r)
}

// referenceMembers is exactMembers as decodeReference used it: the
// object decoded into a map by encoding/json.
func referenceMembers(raw []byte, path string, names []string) error {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return nil
	}
	for k := range obj {
		if err := caseMismatch(k, path, names); err != nil {
			return err
		}
	}
	return nil
}

// referenceVersion is readVersion as decodeReference used it.
func referenceVersion(b []byte) (version string, newer bool, err error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return "", false, &record.FieldError{Field: "message", Reason: "must be a JSON object: " + err.Error()}
	}
	pv, ok := probe["protocol_version"]
	if !ok || json.Unmarshal(pv, &version) != nil {
		return "", false, &record.FieldError{Field: "protocol_version", Reason: "is required and must be a string"}
	}
	newer, err = record.CheckVersion(version)
	return version, newer, err
}

// FuzzDecodeMatchesReference: Decode accepts exactly what decodeReference
// accepts, with the same content, and refuses the rest for the same
// reason (trust.ReasonOf).
func FuzzDecodeMatchesReference(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzDecode", "*"))
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			if v, ok := corpusBytes(b); ok {
				f.Add(v)
			}
		}
	}
	for _, g := range []string{"announce.json", "heartbeat.json", "status.json", "unregister.json"} {
		if b, err := os.ReadFile(filepath.Join("testdata", "golden", g)); err == nil {
			f.Add(b)
			// The same valid message with a number no double holds, in a
			// member nobody reads.
			f.Add(bytes.Replace(b, []byte(`{`), []byte(`{"x":[1e400],`), 1))
		}
	}
	f.Add([]byte(batchGolden))
	f.Add([]byte(`{"protocol_version":"v1.0","type":"heartbeat","beat":{"beat":{},"signature":"AA=="},"x":1e400}`))
	f.Add([]byte(`{"protocol_version":"v1.0","Type":"heartbeat"}`))
	f.Add([]byte(`{"protocol_version":"v9.0","Type":"heartbeat"}`))
	f.Add([]byte(`{"protocol_version":"v1.0","type":"heartbeat"} {}`))
	f.Add([]byte(`[1,`))
	f.Add([]byte(`"x"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data, 0)
		want, wantErr := decodeReference(data, 0)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("Decode: %v; reference: %v\n%q", err, wantErr, data)
		}
		if err != nil {
			if trust.ReasonOf(err) != trust.ReasonOf(wantErr) {
				t.Fatalf("Decode refuses as %s (%v), the reference as %s (%v)\n%q", trust.ReasonOf(err), err, trust.ReasonOf(wantErr), wantErr, data)
			}
			return
		}
		if m.Version != want.Version || m.NewerMinor != want.NewerMinor || m.Kind != want.Kind || !m.Equal(want) {
			t.Fatalf("Decode gave %+v, the reference %+v\n%q", m, want, data)
		}
	})
}

// corpusBytes reads the []byte value of a "go test fuzz v1" corpus file.
func corpusBytes(b []byte) ([]byte, bool) {
	lines := bytes.SplitN(b, []byte("\n"), 3)
	if len(lines) < 2 || !bytes.HasPrefix(lines[1], []byte("[]byte(")) {
		return nil, false
	}
	s, err := strconv.Unquote(string(bytes.TrimSuffix(bytes.TrimPrefix(lines[1], []byte("[]byte(")), []byte(")"))))
	return []byte(s), err == nil
}

// TestDecodeRefusesNumbersBeyondDoubles: a number no double holds is
// refused wherever it is, an unknown member included, and the look for
// one is not fooled by strings and literals.
func TestDecodeRefusesNumbersBeyondDoubles(t *testing.T) {
	hb := string(readGolden(t, "heartbeat.json"))
	with := func(member string) []byte {
		return []byte(strings.Replace(hb, `"type":"heartbeat"`, `"type":"heartbeat",`+member, 1))
	}
	for _, c := range []struct {
		name   string
		member string
		ok     bool
	}{
		{"exponent", `"x":1e400`, false},
		{"nested", `"x":{"y":[true,false,null,-1.5E+999]}`, false},
		{"400 digits", `"x":` + strings.Repeat("9", 400), false},
		{"large but a double", `"x":1.5e308`, true},
		{"digits and e in a string", `"x":"9e999 ` + strings.Repeat("9", 400) + `"`, true},
		{"an escaped quote before them", `"x":"\"9e999"`, true},
		{"literals", `"x":[true,false]`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(with(c.member), 0)
			_, ref := decodeReference(with(c.member), 0)
			if (err == nil) != c.ok || (ref == nil) != c.ok {
				t.Fatalf("Decode: %v, reference: %v; want accepted %v", err, ref, c.ok)
			}
			if !c.ok && trust.ReasonOf(err) != trust.ReasonMalformed {
				t.Fatalf("refused as %s: %v", trust.ReasonOf(err), err)
			}
		})
	}
}

// BenchmarkDecode: Decode next to the reference, a heartbeat and an
// announcement.
func BenchmarkDecode(b *testing.B) {
	for _, g := range []string{"heartbeat.json", "announce.json"} {
		msg, err := os.ReadFile(filepath.Join("testdata", "golden", g))
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range []struct {
			name string
			fn   func([]byte, int) (*Message, error)
		}{{"readEnvelope", Decode}, {"reference", decodeReference}} {
			b.Run(strings.TrimSuffix(g, ".json")+"/"+d.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := d.fn(msg, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestDecodeVersionNull: a null protocol_version is refused as the
// reference refuses it.
func TestDecodeVersionNull(t *testing.T) {
	b := []byte(`{"protocol_version":null,"type":"heartbeat","beat":{"beat":{},"signature":"AA=="}}`)
	_, err := Decode(b, 0)
	_, ref := decodeReference(b, 0)
	if err == nil || trust.ReasonOf(err) != trust.ReasonOf(ref) {
		t.Fatalf("Decode: %v (%s); reference: %v (%s)", err, trust.ReasonOf(err), ref, trust.ReasonOf(ref))
	}
}

// FuzzExactMembers: exactMembers, which reads only the names, refuses a
// member exactly when the map-based reading does, for any input (the
// sync frames it also checks are not canonicalized first).
func FuzzExactMembers(f *testing.F) {
	f.Add([]byte(`{"Beat":1,"signature":"x"}`))
	f.Add([]byte(`{"beat":{"Signature":1},"beat":2}`))
	f.Add([]byte(`{"a":"\xff","SIGNATURE":[1,{"beat":2}]}`))
	f.Add([]byte(`[{"Beat":1}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := exactMembers(data, "beat", wireBeatMembers)
		want := referenceMembers(data, "beat", wireBeatMembers)
		if (got == nil) != (want == nil) {
			t.Fatalf("exactMembers: %v; the map-based reading: %v\n%q", got, want, data)
		}
	})
}
