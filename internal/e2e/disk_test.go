package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
)

// A full disk refuses writes with 507 and a clear CLI message, keeps
// serving reads, accepts writes again once space is freed, survives a
// restart while full and loses nothing (issue 12 item 3: Badger's
// memory-mapped write raised SIGBUS and the daemon died).
func TestFullDiskRefusesWritesAndKeepsServing(t *testing.T) {
	data := testutil.MountTmpfs(t, "8m")

	d := &daemon{t: t, name: "full", dir: t.TempDir(), data: data, args: []string{"--min-free", "1MiB"}}
	d.start()
	t.Cleanup(d.kill)

	spec := func(name string) string {
		return `{"agent_name":"` + name + `","capabilities":{},"transport":{"type":"http","endpoint":"http://127.0.0.1:9"},"skills":[{"skill_id":"s-disk","version":"1.0.0","skill_type":"tool-skill","capabilities":[{"id":"cap.disk","version":"1.0.0"}]}]}`
	}
	register := func(name string) (int, string, map[string]any) {
		code, body := d.send("POST", "/agents", spec(name))
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		if code == http.StatusOK {
			ag, _ := m["agent"].(map[string]any)
			id, _ := ag["agent_id"].(string)
			return code, id, m
		}
		return code, "", m
	}
	var acked []string
	code, id, m := register("before")
	if code != http.StatusOK {
		t.Fatalf("register with room: %d %v", code, m)
	}
	acked = append(acked, id)

	filler := filepath.Join(data, "filler")
	testutil.FillFS(t, filler)
	code, _, m = register("while-full")
	if code != http.StatusInsufficientStorage || m["error"] != "ErrInsufficientStorage" {
		t.Fatalf("register on a full disk: %d %v, want 507 ErrInsufficientStorage", code, m)
	}
	msg, _ := m["message"].(string)
	if !strings.Contains(msg, "disk is full") || !strings.Contains(msg, "storage.minFree") {
		t.Fatalf("507 message does not say what to do: %q", msg)
	}
	specFile := filepath.Join(d.dir, "spec.json")
	if err := os.WriteFile(specFile, []byte(spec("cli-while-full")), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "register", "-f", specFile, "--api", d.api)
	if r.code == 0 || !strings.Contains(r.stderr, "disk is full") {
		t.Fatalf("CLI register on a full disk: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if code, body := d.send("PUT", "/agents/"+id+"/status", `{"status":"DEGRADED"}`); code != http.StatusInsufficientStorage {
		t.Fatalf("status change on a full disk: %d %s", code, body)
	}
	// Reads and health go on.
	var list struct {
		Agents []struct {
			Agent struct {
				AgentID string `json:"agent_id"`
			} `json:"agent"`
		} `json:"agents"`
	}
	d.getJSON("/agents?capability=cap.disk&local_only=true", &list)
	if len(list.Agents) != 1 || list.Agents[0].Agent.AgentID != id {
		t.Fatalf("read on a full disk: %+v", list)
	}
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	d.getJSON("/readyz", &ready)
	if !strings.HasPrefix(ready.Checks["disk"], "full") {
		t.Fatalf("/readyz does not show the full disk: %+v", ready)
	}
	if n := d.metric("agentd_store_writes_refused_total"); n < 3 {
		t.Fatalf("agentd_store_writes_refused_total = %v, want >= 3", n)
	}

	// Space freed: writes are accepted again without a restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	code, id2, m := register("after")
	if code != http.StatusOK {
		t.Fatalf("register once space is freed: %d %v", code, m)
	}
	acked = append(acked, id2)

	// Full again, then a clean restart and a crash: the daemon comes up
	// (the ballast makes room for the closing flush) and serves what was
	// acknowledged.
	testutil.FillFS(t, filler)
	d.stop()
	d.start()
	d.kill()
	d.start()
	d.getJSON("/agents?capability=cap.disk&local_only=true", &list)
	have := map[string]bool{}
	for _, a := range list.Agents {
		have[a.Agent.AgentID] = true
	}
	for _, a := range acked {
		if !have[a] {
			t.Fatalf("acknowledged agent %s lost across a restart on a full disk: %+v\n%s", a, list, d.out.String())
		}
	}
	// A start replaces the registration journal's file with one sized to
	// the room left (docs/operations.md), which can free blocks: take them
	// too, and the guard refuses after the restart as before it.
	testutil.FillFS(t, filler)
	if code, _, m := register("still-full"); code != http.StatusInsufficientStorage {
		t.Fatalf("register after restarting full: %d %v", code, m)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "writes accepted after the restart", func() bool {
		code, _, _ := register("last")
		return code == http.StatusOK
	})
}
