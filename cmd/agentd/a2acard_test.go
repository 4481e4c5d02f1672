package main

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/golang-jwt/jwt/v5"
	"github.com/gowebpki/jcs"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/record"
)

// verifyCardJWS checks a card's signature as a generic A2A client would,
// with a JWS library and RFC 8785 of its own (golang-jwt, gowebpki/jcs):
// the signing input is protected || "." || base64url(JCS(card without
// signatures)).
func verifyCardJWS(t *testing.T, card *a2a.AgentCard, pubPEM string) error {
	t.Helper()
	if len(card.Signatures) != 1 {
		t.Fatalf("%d signatures", len(card.Signatures))
	}
	sig := card.Signatures[0]
	hdr, err := base64.RawURLEncoding.DecodeString(sig.Protected)
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]string
	if err := json.Unmarshal(hdr, &h); err != nil || h["alg"] != "ES256" {
		t.Fatalf("header %s: %v", hdr, err)
	}
	unsigned := *card
	unsigned.Signatures = nil
	raw, err := json.Marshal(unsigned)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(pubPEM))
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	s, err := base64.RawURLEncoding.DecodeString(sig.Signature)
	if err != nil {
		t.Fatal(err)
	}
	return jwt.SigningMethodES256.Verify(sig.Protected+"."+base64.RawURLEncoding.EncodeToString(payload), s, pub)
}

// A2A Agent Cards out: the daemon serves its hosted agent's card at
// /.well-known/agent-card.json, which a2a-go's card resolver fetches and
// parses, signed with the agent's key (verified with a JWS library of its
// own); GET /agents/{id}/card answers any agent; discover --format a2a
// prints cards.
func TestA2ACardsOut(t *testing.T) {
	d := startTestDaemon(t, api.Config{AgentCard: "self"})
	ctx := context.Background()
	resolver := agentcard.NewResolver(http.DefaultClient)
	if _, err := resolver.Resolve(ctx, d.URL); err == nil {
		t.Fatal("a card before the agent is hosted")
	}
	cl, err := client.New(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile(seedPath("004-product-search-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := record.LoadAgentFile("a.yaml", spec)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := cl.Register(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	card, err := resolver.Resolve(ctx, d.URL)
	if err != nil {
		t.Fatalf("a2a-go's resolver: %v", err)
	}
	if card.Name != "product-search-agent" || card.ProtocolVersion != record.A2AProtocolVersion || len(card.Skills) != 1 ||
		card.URL != sa.Agent.Transport.Endpoint {
		t.Fatalf("%+v", card)
	}
	if err := verifyCardJWS(t, card, sa.Agent.PublicKey); err != nil {
		t.Fatalf("the card's signature does not verify with the record's key: %v", err)
	}
	card.Description += " (changed)"
	if err := verifyCardJWS(t, card, sa.Agent.PublicKey); err == nil {
		t.Fatal("a changed card still verifies")
	}

	// The same card at GET /agents/{id}/card.
	resp, err := http.Get(d.URL + "/agents/" + sa.Agent.AgentID + "/card")
	if err != nil {
		t.Fatal(err)
	}
	var got a2a.AgentCard
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	_ = resp.Body.Close()
	if err := verifyCardJWS(t, &got, sa.Agent.PublicKey); err != nil {
		t.Fatal(err)
	}

	// discover --format a2a prints the cards of the answer.
	r := runCLI(t, "", "discover", "--api", strings.TrimPrefix(d.URL, "http://"), "--capability", "product.search", "--format", "a2a")
	var cards []a2a.AgentCard
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &cards) != nil || len(cards) != 1 || cards[0].Name != "product-search-agent" {
		t.Fatalf("discover --format a2a: %+v", r)
	}
}
