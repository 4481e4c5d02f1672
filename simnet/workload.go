package simnet

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Random streams. Every random choice of a run comes from a ChaCha8 source
// keyed by SHA-256(seed, stream, index), so adding draws to one stream never
// shifts another, and choices made concurrently (joins) stay repeatable.
const (
	streamCatalog  = "catalog"
	streamSchedule = "schedule"
	streamSpec     = "spec"
	streamIdentity = "identity"
	streamEvent    = "event"
	streamInterest = "interest"
)

func subSeed(seed uint64, stream string, i uint64) [32]byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], seed)
	binary.BigEndian.PutUint64(b[8:], i)
	h := sha256.New()
	h.Write(b[:8])
	h.Write([]byte(stream))
	h.Write(b[8:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func newRand(seed uint64, stream string, i uint64) *rand.Rand {
	return rand.New(rand.NewChaCha8(subSeed(seed, stream, i)))
}

// mix is a 64-bit finaliser (splitmix64) for per-link draws, which are too
// many for a SHA-256 each.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// newZipf returns a draw of an index in [0, n) with Zipf popularity of
// exponent s (index 0 most popular).
func newZipf(r *rand.Rand, s float64, n int) func() int {
	if n <= 1 {
		return func() int { return 0 }
	}
	if s == 0 { // Scenario.Uniform
		return func() int { return r.IntN(n) }
	}
	z := rand.NewZipf(r, s, 1, uint64(n-1))
	return func() int { return int(z.Uint64()) }
}

// CatalogSkill is one skill of the catalog and the capabilities it offers.
type CatalogSkill struct {
	ID           string   `json:"id"`
	Capabilities []string `json:"capabilities"`
}

// Catalog is the skill catalog of a run. Skills and Capabilities are in
// popularity order (index 0 is drawn most often).
type Catalog struct {
	Skills       []CatalogSkill `json:"skills"`
	Capabilities []string       `json:"capabilities"`
	// Offered are the capabilities at least one skill offers, in
	// popularity order; capability queries draw from them.
	Offered []string `json:"-"`
	zipf    float64
}

// NewCatalog builds the catalog of a seed: skill i offers 1–3 distinct
// capabilities drawn with Zipf popularity.
func NewCatalog(seed uint64, skills, capabilities int, zipf float64) *Catalog {
	r := newRand(seed, streamCatalog, 0)
	c := &Catalog{zipf: zipf}
	for i := range capabilities {
		c.Capabilities = append(c.Capabilities, fmt.Sprintf("cap.%03d", i))
	}
	z := newZipf(r, zipf, capabilities)
	offered := make([]bool, capabilities)
	for i := range skills {
		want := 1 + r.IntN(3)
		want = min(want, capabilities)
		var caps []string
		seen := map[int]bool{}
		for len(caps) < want {
			j := z()
			if seen[j] {
				continue
			}
			seen[j] = true
			offered[j] = true
			caps = append(caps, c.Capabilities[j])
		}
		c.Skills = append(c.Skills, CatalogSkill{ID: fmt.Sprintf("skill-%03d", i), Capabilities: caps})
	}
	for j, ok := range offered {
		if ok {
			c.Offered = append(c.Offered, c.Capabilities[j])
		}
	}
	return c
}

// pickSkills draws 1–3 distinct skills for one agent.
func (c *Catalog) pickSkills(r *rand.Rand) []CatalogSkill {
	z := newZipf(r, c.zipf, len(c.Skills))
	want := min(1+r.IntN(3), len(c.Skills))
	seen := map[int]bool{}
	var out []CatalogSkill
	for len(out) < want {
		j := z()
		if seen[j] {
			continue
		}
		seen[j] = true
		out = append(out, c.Skills[j])
	}
	return out
}

// Query is one discover query of the workload: by capability alone, or by
// skill and capability.
type Query struct {
	Skill      string `json:"skill,omitempty"`
	Capability string `json:"capability"`
}

// drawQuery draws a query: half by capability (Zipf over the offered
// capabilities), half by skill (Zipf) and one of its capabilities.
func (c *Catalog) drawQuery(r *rand.Rand, capZipf, skillZipf func() int) Query {
	if r.IntN(2) == 0 {
		return Query{Capability: c.Offered[capZipf()]}
	}
	s := c.Skills[skillZipf()]
	return Query{Skill: s.ID, Capability: s.Capabilities[r.IntN(len(s.Capabilities))]}
}

// agentShards returns the shards of the capabilities agentSpec gives.
func agentShards(idx int, skills []CatalogSkill) map[string]bool {
	out := map[string]bool{}
	for _, sh := range agentSpec(idx, skills).Shards() {
		out[sh] = true
	}
	return out
}

// pickInterest draws the k capabilities a node asks for when queries keep
// to a per-node interest (Scenario.QueryInterest), with Zipf popularity.
func (c *Catalog) pickInterest(r *rand.Rand, k int, zipf float64) []string {
	z := newZipf(r, zipf, len(c.Offered))
	var out []string
	for tries := 0; len(out) < min(k, len(c.Offered)) && tries < 100*k; tries++ {
		if cp := c.Offered[z()]; !slices.Contains(out, cp) {
			out = append(out, cp)
		}
	}
	return out
}

// agentSpec builds the record a node registers from its skills.
func agentSpec(idx int, skills []CatalogSkill) *record.Agent {
	a := &record.Agent{
		AgentName: fmt.Sprintf("sim-%d", idx),
		Transport: record.Transport{Type: "tcp", Endpoint: fmt.Sprintf("10.%d.%d.%d:9000", (idx>>16)&0xff, (idx>>8)&0xff, idx&0xff)},
	}
	for _, s := range skills {
		sk := record.Skill{SkillID: s.ID, Version: "1.0.0", SkillType: record.SkillTool}
		for _, c := range s.Capabilities {
			sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c})
		}
		a.Skills = append(a.Skills, sk)
	}
	return a
}

// identityFor derives node idx's identity (agent id, ECDSA agent key,
// Ed25519 peer key) from the seed, so peer ids — and with them the DHT's
// key space — are the same in every run of a seed.
func identityFor(seed uint64, idx int) (*trust.Identity, error) {
	r := rand.NewChaCha8(subSeed(seed, streamIdentity, uint64(idx)))
	var edSeed [ed25519.SeedSize]byte
	_, _ = r.Read(edSeed[:])
	pk, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(edSeed[:]))
	if err != nil {
		return nil, fmt.Errorf("peer key: %w", err)
	}
	var ak *ecdsa.PrivateKey
	for ak == nil {
		var raw [32]byte
		_, _ = r.Read(raw[:])
		// Fails only for 0 or a scalar ≥ the group order (p ≈ 2^-32).
		ak, _ = ecdsa.ParseRawPrivateKey(elliptic.P256(), raw[:])
	}
	u, err := uuid.NewRandomFromReader(r)
	if err != nil {
		return nil, fmt.Errorf("agent id: %w", err)
	}
	pid, err := peer.IDFromPrivateKey(pk)
	if err != nil {
		return nil, fmt.Errorf("peer id: %w", err)
	}
	return &trust.Identity{AgentID: u.String(), AgentKey: ak, PeerKey: pk, PeerID: pid}, nil
}
