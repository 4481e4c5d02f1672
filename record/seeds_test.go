package record

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func readSeed(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "seeds", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every example of seeds 000-004 parses with the codec of its shape.
func TestEverySeedExampleParses(t *testing.T) {
	files, err := filepath.Glob("testdata/seeds/*")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		name := filepath.Base(f)
		if name == "README.md" {
			continue
		}
		b := readSeed(t, name)
		t.Run(name, func(t *testing.T) {
			switch {
			case strings.HasPrefix(name, "000-"):
				// The seed-000 agent objects conform to the agent schema
				// and decode; they are not complete agentd records.
				if err := ValidateSchema(SchemaAgent, b); err != nil {
					t.Fatalf("schema: %v", err)
				}
				var a Agent
				if err := DecodeAgent(b, &a); err != nil {
					t.Fatal(err)
				}
				if a.AgentID != testAgentID || a.Capabilities["metrics"] != "2.0" || a.Transport.Endpoint != "10.0.0.12:9000" {
					t.Fatalf("decoded %+v", a)
				}
			case strings.HasPrefix(name, "001-"):
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					if _, err := ParseSkillMessage(line); err != nil {
						t.Fatalf("%q: %v", line, err)
					}
				}
			case name == "002-agent-card.json":
				c, err := ParseAgentCard(b)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.ToAgent(); err != nil {
					t.Fatal(err)
				}
			case name == "002-discover-result.json":
				var rpc struct {
					Result struct {
						Agents []json.RawMessage `json:"agents"`
					} `json:"result"`
				}
				if err := json.Unmarshal(b, &rpc); err != nil || len(rpc.Result.Agents) != 1 {
					t.Fatalf("%v %d", err, len(rpc.Result.Agents))
				}
				c, err := ParseAgentCard(rpc.Result.Agents[0])
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.ToAgent(); err != nil {
					t.Fatal(err)
				}
			case strings.HasPrefix(name, "003-"):
				f, err := ParseWSFrame(b)
				if err != nil {
					t.Fatal(err)
				}
				if want := strings.TrimSuffix(strings.TrimPrefix(name, "003-"), ".json"); f.FrameType() != want {
					t.Fatalf("frame type %q, want %q", f.FrameType(), want)
				}
			case strings.HasPrefix(name, "004-"):
				a, err := LoadAgentFile(name, b)
				if err != nil {
					t.Fatal(err)
				}
				if err := a.ValidateContent(); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("no codec for %s", name)
			}
			checked++
		})
	}
	if checked != 11 {
		t.Fatalf("checked %d seed examples, want 11", checked)
	}
}

// Seed 000 acceptance 3: public_key must be PEM. The seed's own example
// abbreviates it, so it is refused by Validate, naming the field.
func TestSeed000ExampleNeedsARealKey(t *testing.T) {
	var a Agent
	if err := DecodeAgent(readSeed(t, "000-agent.json"), &a); err != nil {
		t.Fatal(err)
	}
	wantField(t, a.ValidateContent(), "public_key")
	k := newKeys(t)
	a.PublicKey = ""
	a.Fill("", k.peerID, k.pubPEM, 1, testNow, time.Hour)
	if _, err := Sign(&a, k.agent, k.peer); err != nil {
		t.Fatalf("the seed example with a real key and agentd's fields does not sign: %v", err)
	}
}

func TestAgentSpecSeedExamples(t *testing.T) {
	k := newKeys(t)
	for _, tc := range []struct {
		file, skill, transport string
		caps                   []string
		tags                   []string
	}{
		{"004-product-search-agent.yaml", "product-search-agent", "tasks.product",
			[]string{"product.search", "product.compare"}, []string{"domain=catalog", "tier=core"}},
		{"004-coordinator-agent.yaml", "coordinator-agent", "tasks.coordinator",
			[]string{"session.orchestrate"}, []string{"critical=true", "tier=platform"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			a, err := LoadAgentFile(tc.file, readSeed(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if a.AgentName != tc.skill || len(a.Skills) != 1 || a.Skills[0].SkillID != tc.skill ||
				a.Skills[0].SkillType != SkillTool || a.Skills[0].Status != StatusHealthy {
				t.Fatalf("agent %+v", a)
			}
			if a.Transport != (Transport{Type: "nats", Endpoint: tc.transport}) {
				t.Fatalf("transport %+v", a.Transport)
			}
			if !reflect.DeepEqual(a.Skills[0].CapabilityIDs(), tc.caps) || !reflect.DeepEqual(a.Tags, tc.tags) {
				t.Fatalf("caps %v tags %v", a.Skills[0].CapabilityIDs(), a.Tags)
			}
			if a.TenantScope != "" || a.Metadata[MetaAgentType] != tc.skill || a.Metadata["consumer_group"] != tc.skill+"-group" {
				t.Fatalf("metadata %v", a.Metadata)
			}
			if len(a.Capabilities) != len(tc.caps) {
				t.Fatalf("capabilities map %v", a.Capabilities)
			}
			a.Fill(ExternalAgentID("test", tc.file), k.peerID, k.pubPEM, 1, testNow, time.Hour)
			sa, err := Sign(a, k.agent, k.peer)
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateSchema(SchemaAnnounce, sa.MarshalAnnounce()); err != nil {
				t.Fatal(err)
			}
			back, _, err := ParseAnnounce(sa.MarshalAnnounce())
			if err != nil || back.VerifySignatures() != nil {
				t.Fatalf("%v", err)
			}
		})
	}
	// The product search agent's input schema survives as JSON.
	a, err := LoadAgentFile("x.yaml", readSeed(t, "004-product-search-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(a.Skills[0].Capabilities[0].InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(schema.Required, []string{"query"}) || schema.Properties["price_min"].Type != "number" {
		t.Fatalf("input schema %s", a.Skills[0].Capabilities[0].InputSchema)
	}
}
