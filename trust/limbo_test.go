package trust

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testdata"
)

// The x509-limbo suite (../shared/testdata/x509, see its README) driven
// through the trust store's path validation: verifyPath (crypto/x509 plus
// agentd's policy) and the CRL layer. The verdicts are compared with the
// suite's expectations and with plain crypto/x509's baseline in the same
// folder.
//
//	go test ./trust -run TestLimbo -v                      # summary
//	go test ./trust -run TestLimbo -update-limbo-doc       # rewrite the table in docs/trust.md

var updateLimboDoc = flag.Bool("update-limbo-doc", false, "rewrite the x509-limbo section of docs/trust.md")

type limboCase struct {
	ID                     string   `json:"id"`
	Features               []string `json:"features"`
	ValidationKind         string   `json:"validation_kind"`
	TrustedCerts           []string `json:"trusted_certs"`
	UntrustedIntermediates []string `json:"untrusted_intermediates"`
	PeerCertificate        string   `json:"peer_certificate"`
	ValidationTime         *string  `json:"validation_time"`
	SignatureAlgorithms    []string `json:"signature_algorithms"`
	KeyUsage               []string `json:"key_usage"`
	ExtendedKeyUsage       []string `json:"extended_key_usage"`
	ExpectedResult         string   `json:"expected_result"`
	ExpectedPeerName       *struct {
		Kind  string `json:"kind"`
		Value string `json:"value"`
	} `json:"expected_peer_name"`
	MaxChainDepth *int     `json:"max_chain_depth"`
	CRLs          []string `json:"crls"`
}

// Cases where agentd's policy deliberately gives another answer than plain
// crypto/x509 where crypto/x509 agrees with limbo. Each is the RFC 5280
// side of a pair whose webpki side (conflicts_with) agentd now passes.
var limboIntentionalFlips = map[string]string{
	"rfc5280::ca-as-leaf":                         "a CA certificate is never an agent or skill certificate (webpki::ca-as-leaf)",
	"pathlen::validation-ignores-pathlen-in-leaf": "the leaf is a CA certificate (cA=TRUE, pathlen 0): refused as an end entity, as webpki::ee-basicconstraints-ca",
	"rfc5280::eku::ee-without-eku":                "an agent certificate must state its extended key usage (webpki::eku::ee-without-eku)",
}

// Why agentd still disagrees with limbo on these cases. Every remaining
// disagreement must be explained here (the test fails otherwise), and an
// explanation for a case that agrees now fails too, so the list stays true.
var limboExplained = map[string]string{
	"pathlen::self-issued-certs-pathlen":                        "crypto/x509 counts self-issued intermediates against pathLenConstraint (RFC 5280 §6.1.4(l) does not); agentd's CA issues no self-issued intermediates",
	"pathological::nc-dos-1":                                    "crypto/x509 evaluates the name-constraint product (bounded by MaxConstraintComparisions) instead of refusing it; a record's bundle is ≤ 12 KiB and its CAs must chain to a configured root",
	"pathological::nc-dos-2":                                    "as nc-dos-1: the constraint product stays under crypto/x509's comparison limit and is evaluated",
	"rfc5280::aki::leaf-missing-aki":                            "AKI is not required: paths are built by name and signature; agentd ca always writes AKI",
	"rfc5280::aki::intermediate-missing-aki":                    "as leaf-missing-aki",
	"rfc5280::aki::cross-signed-root-missing-aki":               "as leaf-missing-aki",
	"rfc5280::ski::root-missing-ski":                            "SKI is not required (RFC 5280 requires CAs to write it, not verifiers to enforce it); agentd ca writes it",
	"rfc5280::ski::intermediate-missing-ski":                    "as root-missing-ski",
	"rfc5280::nc::permitted-dns-match-noncritical":              "crypto/x509 enforces a nameConstraints extension marked non-critical instead of refusing the CA for the marking; the constraint itself is applied",
	"rfc5280::nc::permitted-dn-match":                           "crypto/x509 does not implement directoryName constraints and refuses the critical extension: fails closed",
	"rfc5280::nc::permitted-self-issued":                        "crypto/x509 applies a CA's name constraints to a self-issued intermediate: fails closed",
	"rfc5280::nc::invalid-dnsname-leading-period":               "crypto/x509 accepts a DNS constraint with a leading period; agentd names agents by URI, not DNS",
	"rfc5280::nc::not-allowed-in-ee-noncritical":                "crypto/x509 ignores nameConstraints in an end-entity certificate; harmless (an EE issues nothing)",
	"rfc5280::nc::not-allowed-in-ee-critical":                   "as not-allowed-in-ee-noncritical",
	"rfc5280::nc::nc-forbids-othername-noop":                    "crypto/x509 refuses the critical otherName constraint it cannot evaluate: fails closed",
	"rfc5280::pc::ica-noncritical-pc":                           "policy constraints are not enforced beyond crypto/x509's handling; agentd does not use certificate policies",
	"rfc5280::san::noncritical-with-empty-subject":              "SAN criticality with an empty subject is not checked; agentd ca always writes a subject CN",
	"rfc5280::san::underscore-dns":                              "DNS SAN syntax is crypto/x509's (it tolerates '_'); agentd does not match DNS names",
	"rfc5280::validity::notafter-fractional":                    "crypto/x509 treats a notAfter with fractional seconds as expiring at the whole second: one second early, fails closed",
	"rfc5280::ca-empty-subject":                                 "an empty CA subject is not refused; it cannot collide with a named issuer because paths also need the signature",
	"rfc5280::root-non-critical-basic-constraints":              "a trust anchor's extension criticality is not checked: anchors are configured by the operator",
	"rfc5280::root-inconsistent-ca-extensions":                  "as root-non-critical-basic-constraints",
	"webpki::aki::root-with-aki-missing-keyidentifier":          "CABF rules for root AKI contents are not enforced: anchors are configured by the operator",
	"webpki::aki::root-with-aki-authoritycertissuer":            "as root-with-aki-missing-keyidentifier",
	"webpki::aki::root-with-aki-authoritycertserialnumber":      "as root-with-aki-missing-keyidentifier",
	"webpki::aki::root-with-aki-all-fields":                     "as root-with-aki-missing-keyidentifier",
	"webpki::aki::root-with-aki-ski-mismatch":                   "as root-with-aki-missing-keyidentifier",
	"webpki::cn::ipv4-hex-mismatch":                             "TLS host-name matching against the CN is crypto/x509's; agentd never matches host names (it matches the agent URI)",
	"webpki::cn::ipv4-leading-zeros-mismatch":                   "as ipv4-hex-mismatch",
	"webpki::cn::ipv6-uppercase-mismatch":                       "as ipv4-hex-mismatch",
	"webpki::cn::ipv6-uncompressed-mismatch":                    "as ipv4-hex-mismatch",
	"webpki::cn::ipv6-non-rfc5952-mismatch":                     "as ipv4-hex-mismatch",
	"webpki::cn::punycode-not-in-san":                           "as ipv4-hex-mismatch",
	"webpki::cn::utf8-vs-punycode-mismatch":                     "as ipv4-hex-mismatch",
	"webpki::cn::not-in-san":                                    "as ipv4-hex-mismatch",
	"webpki::cn::case-mismatch":                                 "as ipv4-hex-mismatch",
	"webpki::eku::ee-critical-eku":                              "a critical EKU is allowed by RFC 5280; only CABF forbids it",
	"webpki::eku::root-has-eku":                                 "CABF forbids EKU in roots; agentd instead requires a CA's EKU, when present, to allow the leaf's usage",
	"webpki::san::public-suffix-wildcard-san":                   "public-suffix wildcard rules concern TLS host names, which agentd does not match",
	"webpki::san::public-suffix-multi-label-wildcard-san":       "as public-suffix-wildcard-san",
	"webpki::san::public-suffix-private-namespace-wildcard-san": "as public-suffix-wildcard-san",
	"webpki::san::san-critical-with-nonempty-subject":           "SAN criticality is not checked (CABF rule)",
}

type limboResult struct {
	id, expected, actual, baseline, detail string
}

func (r limboResult) agree() bool { return r.actual == r.expected }

func TestLimbo(t *testing.T) {
	dir := testdata.Path(t, "x509")
	raw, err := os.ReadFile(filepath.Join(dir, "limbo.json"))
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Version   int         `json:"version"`
		Testcases []limboCase `json:"testcases"`
	}
	if err := json.Unmarshal(raw, &suite); err != nil {
		t.Fatal(err)
	}
	if len(suite.Testcases) != 208 {
		t.Fatalf("limbo.json holds %d cases, want 208", len(suite.Testcases))
	}
	baseline := readBaseline(t, filepath.Join(dir, "go-crypto-x509-baseline.tsv"))

	var results []limboResult
	counts := map[string]int{}
	for _, tc := range suite.Testcases {
		actual, detail := runLimbo(tc)
		b := baseline[tc.ID]
		r := limboResult{id: tc.ID, expected: tc.ExpectedResult, actual: actual, baseline: b.verdict, detail: detail}
		results = append(results, r)
		switch {
		case actual == "SKIPPED":
			counts["skipped"]++
		case r.agree():
			counts["agree"]++
		default:
			counts["disagree"]++
		}
		// No regression: every case crypto/x509 gets right stays right,
		// except the ones agentd's policy flips on purpose.
		if b.verdict == "CONFORMANT" && !r.agree() {
			if why, ok := limboIntentionalFlips[tc.ID]; ok {
				t.Logf("intentional flip %s: %s", tc.ID, why)
			} else {
				t.Errorf("regression on %s: crypto/x509 answers %s as limbo expects, the trust store answers %s (%s)", tc.ID, tc.ExpectedResult, actual, detail)
			}
		}
		if actual != "SKIPPED" && !r.agree() {
			if _, ok := limboExplained[tc.ID]; !ok {
				if _, flip := limboIntentionalFlips[tc.ID]; !flip {
					t.Errorf("unexplained disagreement %s: expected %s, got %s (%s)", tc.ID, tc.ExpectedResult, actual, detail)
				}
			}
		}
		if _, ok := limboExplained[tc.ID]; ok && r.agree() {
			t.Errorf("%s agrees now; remove it from limboExplained", tc.ID)
		}
	}
	bc := baselineCounts(baseline)
	t.Logf("x509-limbo, %d cases: trust store agree %d, disagree %d, skipped %d; crypto/x509 baseline conformant %d, nonconformant %d, skipped %d",
		len(results), counts["agree"], counts["disagree"], counts["skipped"], bc["CONFORMANT"], bc["NONCONFORMANT"], bc["SKIPPED"])
	// The critical cases (expiry) and the CRL cases must all agree.
	for _, r := range results {
		if strings.HasPrefix(r.id, "crl::") && !r.agree() {
			t.Errorf("CRL case %s: expected %s, got %s (%s)", r.id, r.expected, r.actual, r.detail)
		}
	}
	if *updateLimboDoc {
		writeLimboDoc(t, results, counts, bc)
	}
}

// runLimbo returns SUCCESS, FAILURE or SKIPPED and a detail.
func runLimbo(tc limboCase) (string, string) {
	if len(tc.SignatureAlgorithms) > 0 {
		return "SKIPPED", "signature_algorithms restrictions are not supported"
	}
	for _, ku := range tc.KeyUsage {
		if ku != "digitalSignature" {
			return "SKIPPED", "key_usage " + ku
		}
	}
	parse := func(s string) (*x509.Certificate, error) {
		b, _ := pem.Decode([]byte(s))
		if b == nil {
			return nil, fmt.Errorf("not PEM")
		}
		return x509.ParseCertificate(b.Bytes)
	}
	var roots, inter []*x509.Certificate
	for _, s := range tc.TrustedCerts {
		c, err := parse(s)
		if err != nil {
			return "FAILURE", "trusted cert: " + err.Error()
		}
		roots = append(roots, c)
	}
	for _, s := range tc.UntrustedIntermediates {
		c, err := parse(s)
		if err != nil {
			return "FAILURE", "intermediate: " + err.Error()
		}
		inter = append(inter, c)
	}
	leaf, err := parse(tc.PeerCertificate)
	if err != nil {
		return "FAILURE", "leaf: " + err.Error()
	}
	var crls []*crl
	for i, s := range tc.CRLs {
		cs, err := parseCRLFile([]byte(s), fmt.Sprintf("crl%d", i))
		if err != nil {
			return "FAILURE", err.Error()
		}
		crls = append(crls, cs...)
	}
	sn := newSnapshot(roots, nil, crls, nil, 0)
	p := pathPolicy{now: time.Now(), maxIntermediates: -1, checkRevocation: true}
	if tc.MaxChainDepth != nil {
		p.maxIntermediates = *tc.MaxChainDepth
	}
	if tc.ValidationTime != nil {
		vt, err := time.Parse(time.RFC3339, *tc.ValidationTime)
		if err != nil {
			return "SKIPPED", "validation_time: " + err.Error()
		}
		p.now = vt
	}
	ekus := map[string]x509.ExtKeyUsage{"serverAuth": x509.ExtKeyUsageServerAuth, "clientAuth": x509.ExtKeyUsageClientAuth,
		"codeSigning": x509.ExtKeyUsageCodeSigning, "emailProtection": x509.ExtKeyUsageEmailProtection,
		"timeStamping": x509.ExtKeyUsageTimeStamping, "OCSPSigning": x509.ExtKeyUsageOCSPSigning, "anyExtendedKeyUsage": x509.ExtKeyUsageAny}
	for _, e := range tc.ExtendedKeyUsage {
		u, ok := ekus[e]
		if !ok {
			return "SKIPPED", "extended_key_usage " + e
		}
		p.ekus = append(p.ekus, u)
	}
	if len(p.ekus) == 0 {
		if tc.ValidationKind == "CLIENT" {
			p.ekus = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		} else {
			p.ekus = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
	}
	if len(tc.KeyUsage) > 0 {
		p.leafKU = x509.KeyUsageDigitalSignature
	}
	if tc.ValidationKind == "SERVER" && tc.ExpectedPeerName != nil {
		switch tc.ExpectedPeerName.Kind {
		case "DNS":
			p.dnsName = tc.ExpectedPeerName.Value
		case "IP":
			p.dnsName = tc.ExpectedPeerName.Value
			if strings.Contains(p.dnsName, ":") {
				p.dnsName = "[" + p.dnsName + "]"
			}
		default:
			return "SKIPPED", "expected_peer_name kind " + tc.ExpectedPeerName.Kind
		}
	}
	s := &Store{interned: map[[32]byte]*x509.Certificate{}}
	s.snap.Store(sn)
	if _, err := s.verifyPath(sn, leaf, inter, p); err != nil {
		return "FAILURE", err.Error()
	}
	return "SUCCESS", ""
}

type baselineRow struct{ expected, actual, verdict string }

func readBaseline(t *testing.T, path string) map[string]baselineRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read-only
	m := map[string]baselineRow{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) < 4 {
			t.Fatalf("baseline line %q", line)
		}
		m[cols[0]] = baselineRow{expected: cols[1], actual: cols[2], verdict: cols[3]}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(m) != 208 {
		t.Fatalf("baseline has %d rows", len(m))
	}
	return m
}

func baselineCounts(b map[string]baselineRow) map[string]int {
	c := map[string]int{}
	for _, r := range b {
		c[r.verdict]++
	}
	return c
}

const (
	limboBegin = "<!-- limbo:begin (generated by go test ./trust -run TestLimbo -update-limbo-doc) -->"
	limboEnd   = "<!-- limbo:end -->"
)

func writeLimboDoc(t *testing.T, results []limboResult, counts, bc map[string]int) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", limboBegin)
	fmt.Fprintf(&b, "| verifier | agree (conformant) | disagree | skipped |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| plain `crypto/x509` (baseline file) | %d | %d | %d |\n", bc["CONFORMANT"], bc["NONCONFORMANT"], bc["SKIPPED"])
	fmt.Fprintf(&b, "| agentd `trust.Store` | %d | %d | %d |\n\n", counts["agree"], counts["disagree"], counts["skipped"])
	var fixed []limboResult
	for _, r := range results {
		if r.baseline != "CONFORMANT" && r.agree() {
			fixed = append(fixed, r)
		}
	}
	sort.Slice(fixed, func(i, j int) bool { return fixed[i].id < fixed[j].id })
	fmt.Fprintf(&b, "Cases the trust store gets right where plain crypto/x509 does not (%d):\n\n", len(fixed))
	for _, r := range fixed {
		why := "agentd policy"
		switch {
		case strings.HasPrefix(r.id, "crl::"):
			why = "CRL layer"
		case strings.HasPrefix(r.id, "pathlen::max-chain-depth"), strings.Contains(r.id, "max-depth"):
			why = "maximum number of intermediates"
		}
		if r.baseline == "SKIPPED" {
			why += " (skipped by the baseline)"
		}
		fmt.Fprintf(&b, "- `%s` (%s): %s\n", r.id, strings.ToLower(r.expected), why)
	}
	var dis []limboResult
	for _, r := range results {
		if r.actual != "SKIPPED" && !r.agree() {
			dis = append(dis, r)
		}
	}
	sort.Slice(dis, func(i, j int) bool { return dis[i].id < dis[j].id })
	fmt.Fprintf(&b, "\nRemaining disagreements (%d), each with why it does not matter for agentd or fails closed:\n\n", len(dis))
	for _, r := range dis {
		why, ok := limboExplained[r.id]
		if !ok {
			why = "intentional: " + limboIntentionalFlips[r.id]
		}
		fmt.Fprintf(&b, "- `%s`: expected %s, got %s. %s.\n", r.id, strings.ToLower(r.expected), strings.ToLower(r.actual), why)
	}
	var sk []limboResult
	for _, r := range results {
		if r.actual == "SKIPPED" {
			sk = append(sk, r)
		}
	}
	if len(sk) > 0 {
		fmt.Fprintf(&b, "\nSkipped (%d):\n\n", len(sk))
		for _, r := range sk {
			fmt.Fprintf(&b, "- `%s`: %s\n", r.id, r.detail)
		}
	}
	fmt.Fprintf(&b, "\n%s", limboEnd)
	path := filepath.Join("..", "docs", "trust.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, limboBegin), strings.Index(s, limboEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q section", path, limboBegin, limboEnd)
	}
	s = s[:i] + b.String() + s[j+len(limboEnd):]
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
