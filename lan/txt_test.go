package lan

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

const (
	goldenID   = "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d"
	goldenPeer = "12D3KooWKUuphQ4eQdaBxu7LLNvZJm3LsvSMk7fvyVVxP9pcaSmf"
)

func goldenSummary() Summary {
	var h [32]byte
	for i := range h {
		h[i] = byte(i)
	}
	return Summary{ProtocolVersion: "v1.0", AgentID: goldenID, PeerID: goldenPeer, Hash: h, Seq: 42,
		Capabilities: []string{"org-data-read", "user-auth"}}
}

func TestTXTGolden(t *testing.T) {
	txt, err := goldenSummary().TXT()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"txtvers=1",
		"pv=v1.0",
		"id=" + goldenID,
		"peer=" + goldenPeer,
		"h=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
		"seq=42",
		"caps=org-data-read,user-auth",
	}
	if !reflect.DeepEqual(txt, want) {
		t.Fatalf("TXT\n got %q\nwant %q", txt, want)
	}
	if n := TXTSize(txt); n > MaxTXTBytes {
		t.Fatalf("%d bytes", n)
	}
	got, err := ParseTXT(txt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, goldenSummary()) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, goldenSummary())
	}
}

// The capability list is left out when it would not fit, never cut.
func TestTXTCapsOnlyIfTheyFit(t *testing.T) {
	s := goldenSummary()
	s.Capabilities = nil
	for i := range 40 {
		s.Capabilities = append(s.Capabilities, fmt.Sprintf("capability-%02d", i))
	}
	txt, err := s.TXT()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range txt {
		if strings.HasPrefix(x, "caps=") {
			t.Fatalf("caps included: %d bytes in all", TXTSize(txt))
		}
		if len(x) > MaxTXTString {
			t.Fatalf("string of %d bytes", len(x))
		}
	}
	if TXTSize(txt) > MaxTXTBytes {
		t.Fatalf("%d bytes", TXTSize(txt))
	}
	got, err := ParseTXT(txt)
	if err != nil || got.Capabilities != nil {
		t.Fatalf("parse = %+v, %v", got, err)
	}
}

// Every record agentd can sign yields a TXT summary within the limits.
func TestTXTOfSignedRecord(t *testing.T) {
	id := newIdentity(t)
	a := &record.Agent{AgentName: strings.Repeat("n", 63), Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.1:9000"}, Skills: []record.Skill{skill("s", record.SkillTool, nil, "c")}}
	a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), record.MaxSeq, time.Now(), time.Hour)
	sa, err := id.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	txt, err := SummaryOf(sa).TXT()
	if err != nil {
		t.Fatal(err)
	}
	if TXTSize(txt) > MaxTXTBytes {
		t.Fatalf("%d bytes", TXTSize(txt))
	}
	got, err := ParseTXT(txt)
	if err != nil || got.Hash != sa.Hash() || got.Seq != record.MaxSeq {
		t.Fatalf("parse = %+v, %v", got, err)
	}
	if l := instanceLabel(&sa.Agent); len(l) > 63 {
		t.Fatalf("instance label of %d bytes", len(l))
	}
}

// RFC 6763 §6.4: keys are case-insensitive, the first occurrence wins,
// unknown keys and attributes without '=' are ignored.
func TestParseTXTRules(t *testing.T) {
	txt, _ := goldenSummary().TXT()
	mixed := append([]string{"ID=" + goldenID, "flag", "=empty-key", "future=1"}, txt...)
	mixed = append(mixed, "seq=7")
	got, err := ParseTXT(mixed)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 42 || got.AgentID != goldenID {
		t.Fatalf("got %+v", got)
	}
	// pv is optional and defaults to ours.
	var noPV []string
	for _, x := range txt {
		if !strings.HasPrefix(x, "pv=") {
			noPV = append(noPV, x)
		}
	}
	if got, err := ParseTXT(noPV); err != nil || got.ProtocolVersion != record.ProtocolVersion {
		t.Fatalf("without pv: %+v, %v", got, err)
	}
}

func TestParseTXTErrors(t *testing.T) {
	base, _ := goldenSummary().TXT()
	with := func(key, val string) []string {
		var out []string
		for _, x := range base {
			if !strings.HasPrefix(x, key+"=") {
				out = append(out, x)
			}
		}
		if val != "\x00" {
			out = append(out, key+"="+val)
		}
		return out
	}
	for name, txt := range map[string][]string{
		"no txtvers":    with("txtvers", "\x00"),
		"txtvers 2":     with("txtvers", "2"),
		"pv v2":         with("pv", "v2.0"),
		"pv junk":       with("pv", "1.0"),
		"no id":         with("id", "\x00"),
		"id not uuid":   with("id", "agent-001"),
		"no peer":       with("peer", "\x00"),
		"peer junk":     with("peer", "QmNotAPeer"),
		"no h":          with("h", "\x00"),
		"h short":       with("h", "AAEC"),
		"h padded":      with("h", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="),
		"h std base64":  with("h", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+"),
		"no seq":        with("seq", "\x00"),
		"seq leading 0": with("seq", "042"),
		"seq negative":  with("seq", "-1"),
		"seq too big":   with("seq", "9007199254740992"),
		"caps bad":      with("caps", "a,,b"),
		"caps sep":      with("caps", "a;b"),
		"too long":      append(with("caps", "\x00"), strings.Repeat("x", 255), strings.Repeat("y", 255), strings.Repeat("z", 255), strings.Repeat("w", 255), strings.Repeat("v", 255)),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseTXT(txt); !errors.Is(err, ErrTXT) {
				t.Fatalf("err = %v, want ErrTXT", err)
			}
		})
	}
}
