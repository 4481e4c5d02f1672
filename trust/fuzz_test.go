package trust

import (
	"bytes"
	"encoding/pem"
	"math/big"
	"testing"
)

// Fuzz targets for the parsers of this package. Each asserts a round trip
// beyond "no panic"; the seed corpora are under testdata/fuzz/<Target>.

// FuzzParseSerial: an accepted serial formats to text that parses to the
// same number, and formatting is canonical (upper-case, even length).
func FuzzParseSerial(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSerial(s)
		if err != nil {
			return
		}
		if n.Sign() < 0 {
			t.Fatalf("negative serial from %q", s)
		}
		out := FormatSerial(n)
		n2, err := ParseSerial(out)
		if err != nil || n2.Cmp(n) != 0 {
			t.Fatalf("%q → %s → %v, %v", s, out, n2, err)
		}
		if FormatSerial(n2) != out || len(out)%2 != 0 || bytes.ContainsAny([]byte(out), "abcdef") {
			t.Fatalf("format %q is not canonical", out)
		}
		if serialKey(n) != serialKey(new(big.Int).Set(n2)) {
			t.Fatal("serial keys differ")
		}
	})
}

// FuzzParseCertificateFile: the certificates of an accepted file,
// re-encoded as PEM, parse to the same certificates.
func FuzzParseCertificateFile(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		certs, err := ParseCertificateFile(b)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		for _, c := range certs {
			if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}); err != nil {
				t.Fatal(err)
			}
		}
		again, err := ParseCertificateFile(buf.Bytes())
		if err != nil || len(again) != len(certs) {
			t.Fatalf("re-encoded file refused: %v", err)
		}
		for i := range certs {
			if !certs[i].Equal(again[i]) {
				t.Fatalf("certificate %d changed", i)
			}
		}
	})
}

// FuzzParseCRLFile: the CRLs of an accepted file, re-encoded as PEM, parse
// to the same lists with the same verdict on their structure.
func FuzzParseCRLFile(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		crls, err := parseCRLFile(b, "fuzz")
		if err != nil {
			return
		}
		var buf bytes.Buffer
		for _, c := range crls {
			if err := pem.Encode(&buf, &pem.Block{Type: "X509 CRL", Bytes: c.rl.Raw}); err != nil {
				t.Fatal(err)
			}
		}
		again, err := parseCRLFile(buf.Bytes(), "fuzz")
		if err != nil || len(again) != len(crls) {
			t.Fatalf("re-encoded CRLs refused: %v", err)
		}
		for i := range crls {
			if !bytes.Equal(crls[i].rl.Raw, again[i].rl.Raw) || len(crls[i].serials) != len(again[i].serials) ||
				(crls[i].structErr == nil) != (again[i].structErr == nil) {
				t.Fatalf("CRL %d changed", i)
			}
		}
	})
}

// FuzzParseCSRPEM: an accepted request re-encodes as PEM to the same
// request, with the same signature verdict and the same agent name.
func FuzzParseCSRPEM(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		csr, err := ParseCSRPEM(b)
		if err != nil {
			return
		}
		again, err := ParseCSRPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr.Raw}))
		if err != nil {
			t.Fatalf("re-encoded request refused: %v", err)
		}
		if !bytes.Equal(again.Raw, csr.Raw) || (csr.CheckSignature() == nil) != (again.CheckSignature() == nil) || csrAgentID(csr) != csrAgentID(again) {
			t.Fatal("request changed on a round trip")
		}
	})
}
