package trust

// Files: reading the trust store's certificates and CRLs from files and
// directories, bounded.

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentd/agentd/internal/fsutil"
)

var (
	certExts = map[string]bool{".pem": true, ".crt": true, ".cer": true, ".cert": true}
	crlExts  = map[string]bool{".crl": true, ".der": true}
)

// expand lists the files named by paths: files as given, directories by
// their regular non-hidden files with one of exts, sorted.
func expand(paths []string, exts map[string]bool) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || !exts[strings.ToLower(filepath.Ext(n))] {
				continue
			}
			full := filepath.Join(p, n)
			if fi, err := os.Stat(full); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			names = append(names, full)
		}
		sort.Strings(names)
		out = append(out, names...)
	}
	return out, nil
}

func readBounded(path string) ([]byte, error) { return fsutil.ReadFile(path, maxTrustFileBytes) }

func loadCertPaths(paths []string) ([]*x509.Certificate, error) {
	files, err := expand(paths, certExts)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for _, f := range files {
		b, err := readBounded(f)
		if err != nil {
			return nil, err
		}
		certs, err := ParseCertificateFile(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, certs...)
	}
	return out, nil
}

// ParseCertificateFile parses the PEM certificates of a file, or one DER
// certificate. Any PEM block that is not a CERTIFICATE is an error (a
// private key in a trust file is a mistake worth stopping for).
func ParseCertificateFile(b []byte) ([]*x509.Certificate, error) {
	ders, err := pemBlocks(b, "CERTIFICATE", "a trust file")
	if err != nil {
		return nil, err
	}
	if ders == nil {
		if len(bytes.TrimSpace(b)) == 0 {
			return nil, errors.New("is empty")
		}
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("holds no PEM certificate and is not a DER certificate: %w", err)
		}
		return []*x509.Certificate{c}, nil
	}
	out := make([]*x509.Certificate, 0, len(ders))
	for i, der := range ders {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", i+1, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// pemBlocks returns the contents of the PEM blocks of b, which must all be
// of type want, with nothing but space after the last; nil when b holds no
// PEM block (it may be DER). in names the kind of file for the error.
func pemBlocks(b []byte, want, in string) ([][]byte, error) {
	var out [][]byte
	rest := b
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != want {
			return nil, fmt.Errorf("holds a PEM %q block; only %s blocks belong in %s", block.Type, want, in)
		}
		out = append(out, block.Bytes)
	}
	if out != nil && len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("has data after the last PEM block")
	}
	return out, nil
}

func loadCRLPaths(paths []string) ([]*crl, error) {
	files, err := expand(paths, crlExts)
	if err != nil {
		return nil, err
	}
	var out []*crl
	for _, f := range files {
		b, err := readBounded(f)
		if err != nil {
			return nil, err
		}
		cs, err := parseCRLFile(b, f)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// parseCRLFile parses the PEM "X509 CRL" blocks of a file, or one DER CRL.
func parseCRLFile(b []byte, source string) ([]*crl, error) {
	ders, err := pemBlocks(b, "X509 CRL", "a CRL file")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if ders == nil {
		c, err := parseCRL(b, source)
		if err != nil {
			return nil, err
		}
		return []*crl{c}, nil
	}
	out := make([]*crl, 0, len(ders))
	for i, der := range ders {
		name := source
		if len(ders) > 1 {
			name = fmt.Sprintf("%s#%d", source, i+1)
		}
		c, err := parseCRL(der, name)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
