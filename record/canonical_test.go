package record

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/testdata"
	"github.com/gowebpki/jcs"
)

// The six reference pairs of cyberphone/json-canonicalization: input →
// output byte for byte, and the output is a fixed point.
func TestJCSReferenceVectors(t *testing.T) {
	dir := testdata.Path(t, "jcs")
	names := []string{"arrays", "french", "structures", "unicode", "values", "weird"}
	for _, n := range names {
		in, err := os.ReadFile(filepath.Join(dir, "input", n+".json"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(dir, "output", n+".json"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := CanonicalizeJSON(in)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", n, got, want)
		}
		again, err := CanonicalizeJSON(want)
		if err != nil || !bytes.Equal(again, want) {
			t.Errorf("%s: canonicalizing the output again gives %q, %v", n, again, err)
		}
		// outhex holds the same expected bytes.
		hexText, err := os.ReadFile(filepath.Join(dir, "outhex", n+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		var fromHex []byte
		for _, h := range strings.Fields(string(hexText)) {
			v, err := strconv.ParseUint(h, 16, 8)
			if err != nil {
				t.Fatal(err)
			}
			fromHex = append(fromHex, byte(v))
		}
		if !bytes.Equal(fromHex, want) {
			t.Errorf("%s: outhex and output disagree", n)
		}
	}
}

// All 100 000 ES6 number vectors go through CanonicalizeJSON, the path the
// signer uses, alone and inside an object; Canonicalize of the float64 (the
// json.Marshal path) gives the same text.
func TestJCSNumbers(t *testing.T) {
	f, err := os.Open(testdata.Path(t, "jcs", "numbers", "es6testfile100k.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		hexBits, want, ok := strings.Cut(sc.Text(), ",")
		if !ok {
			t.Fatalf("line %d: %q", n+1, sc.Text())
		}
		bits, err := strconv.ParseUint(hexBits, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		v := math.Float64frombits(bits)
		text := strconv.FormatFloat(v, 'g', -1, 64)
		got, err := CanonicalizeJSON([]byte(text))
		if err != nil || string(got) != want {
			t.Fatalf("line %d: %s (%s) canonicalizes to %q, %v; want %q", n+1, hexBits, text, got, err, want)
		}
		got, err = CanonicalizeJSON([]byte(`{"n":` + text + `}`))
		if err != nil || string(got) != `{"n":`+want+`}` {
			t.Fatalf("line %d: in an object: %q, %v", n+1, got, err)
		}
		got, err = Canonicalize(v)
		if err != nil || string(got) != want {
			t.Fatalf("line %d: Canonicalize(%v) = %q, %v; want %q", n+1, v, got, err, want)
		}
		back, err := strconv.ParseFloat(want, 64)
		if err != nil || (back != v && !(v == 0 && back == 0)) {
			t.Fatalf("line %d: %q does not round-trip to %v", n+1, want, v)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 100000 {
		t.Fatalf("read %d vectors, want 100000", n)
	}
}

// NaN and the infinities cannot be written in JSON: they are refused by
// Canonicalize (the signer's path for Go values) and by jcs.NumberToJSON,
// and numbers that overflow a double are refused as JSON text.
func TestJCSInvalidNumbers(t *testing.T) {
	b, err := os.ReadFile(testdata.Path(t, "jcs", "numbers", "es6-invalid.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if len(lines) != 3 {
		t.Fatalf("want 3 invalid patterns, got %d", len(lines))
	}
	for _, l := range lines {
		hexBits, want, _ := strings.Cut(l, ",")
		if want != "null" {
			t.Fatalf("%q is not marked invalid", l)
		}
		bits, _ := strconv.ParseUint(hexBits, 16, 64)
		v := math.Float64frombits(bits)
		if out, err := Canonicalize(v); err == nil {
			t.Errorf("Canonicalize(%v) = %q, want an error", v, out)
		}
		if _, err := Canonicalize(map[string]any{"x": []any{v}}); err == nil {
			t.Errorf("Canonicalize of a nested %v succeeded", v)
		}
		if out, err := jcs.NumberToJSON(v); err == nil {
			t.Errorf("jcs.NumberToJSON(%v) = %q, want an error", v, out)
		}
	}
	for _, s := range []string{"NaN", "Infinity", "-Infinity", "1e400", "-1e309", "[1e99999]"} {
		if out, err := CanonicalizeJSON([]byte(s)); err == nil {
			t.Errorf("CanonicalizeJSON(%s) = %q, want an error", s, out)
		}
	}
}

// RFC 8785 requires I-JSON input.
func TestJCSRejectsNonIJSON(t *testing.T) {
	for _, s := range []string{
		`{"a":1,"a":2}`,
		`{"a":"\ud800"}`,
		`{"a":"\udc00x"}`,
		"{\"a\":\"\xff\"}",
		`{"a":1,}`,
		`{"a":1} x`,
		`{'a':1}`,
	} {
		if out, err := CanonicalizeJSON([]byte(s)); err == nil {
			t.Errorf("CanonicalizeJSON(%q) = %q, want an error", s, out)
		}
	}
}

// FuzzCanonicalizeJSON checks CanonicalizeJSON against the reference
// implementation of RFC 8785 (cyberphone's, as gowebpki/jcs publishes it,
// which agentd used before): where both accept a document they agree byte
// for byte, every output of the reference (what an earlier agentd signed)
// is accepted unchanged, the output is a fixed point, and the input is
// never modified.
func FuzzCanonicalizeJSON(f *testing.F) {
	dir := testdata.Path(f, "jcs", "input")
	ents, err := os.ReadDir(dir)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{`{"b":1,"a":[1e2,-0,0.1,"\u00e9\u2028\t"]}`, `1e400`, `{"a":1,"a":2}`, `"\ud83d\ude00"`, `{"\u20ac":1,"\ud83d\ude00":2,"\ufb33":3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		keep := bytes.Clone(in)
		got, err := CanonicalizeJSON(in)
		if !bytes.Equal(in, keep) {
			t.Fatalf("input modified: %q → %q", keep, in)
		}
		ref, refErr := jcs.Transform(keep)
		if refErr == nil {
			// What a node of an earlier version signed and sent.
			if mine, err := CanonicalizeJSON(ref); err != nil || !bytes.Equal(mine, ref) {
				t.Fatalf("%q: the reference's output %q canonicalizes to %q, %v", keep, ref, mine, err)
			}
		}
		if err != nil {
			return
		}
		if refErr != nil {
			t.Fatalf("%q: accepted as %q, the reference refuses it: %v", in, got, refErr)
		}
		if !bytes.Equal(got, ref) {
			t.Fatalf("%q:\n got %q\nwant %q", in, got, ref)
		}
		again, err := CanonicalizeJSON(got)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("%q: not a fixed point: %q, %v", got, again, err)
		}
	})
}
