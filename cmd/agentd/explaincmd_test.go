package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd/api"
)

func TestExplainCommand(t *testing.T) {
	d := startTestDaemon(t, api.Config{})
	apiFlag := []string{"--api", strings.TrimPrefix(d.URL, "http://")}
	run := func(args ...string) result {
		return runCLI(t, "", append(append([]string{"explain"}, apiFlag...), args...)...)
	}
	if r := runCLI(t, "", "register", "--api", apiFlag[1], "-f", seedPath("004-product-search-agent.yaml")); r.code != 0 {
		t.Fatalf("register: %+v", r)
	}
	id := d.ID.AgentID

	r := run(id)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "VISIBLE: Agent "+id+" is hosted by this node") || !strings.Contains(r.stdout, "local      record") {
		t.Fatalf("explain hosted agent: %+v", r)
	}
	r = run("--capability", "product.search", "--version", ">=9", "--local", id)
	if r.code != 1 || !strings.HasPrefix(r.stdout, "FILTERED:") || !strings.Contains(r.stdout, "filters it does not match: version=>=9") {
		t.Fatalf("explain filtered: %+v", r)
	}
	r = run("--capability", "product.search", "--local")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "FOUND: 1 agent(s) found; the local step answered") || !strings.Contains(r.stdout, id+"  product-search-agent  local") {
		t.Fatalf("explain capability: %+v", r)
	}
	unknown := "2f6b1c8e-7d4a-4e3b-9a5c-1d2e3f4a5b6c"
	r = run("--json", unknown)
	var ex struct {
		Verdict string   `json:"verdict"`
		Next    []string `json:"next"`
	}
	if r.code != 1 || json.Unmarshal([]byte(r.stdout), &ex) != nil || ex.Verdict != "unknown" || len(ex.Next) == 0 || r.stderr != "" {
		t.Fatalf("explain --json of an unknown agent: %+v", r)
	}
	// Usage errors: nothing to explain, a bad id, flags after the id.
	for _, args := range [][]string{{}, {"nope"}, {id, "--capability", "x"}, {"--timeout", "1m", id}} {
		if r := run(args...); r.code != exitUsage || r.stderr == "" {
			t.Fatalf("explain %q: %+v", args, r)
		}
	}
}
