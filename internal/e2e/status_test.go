package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

func (d *daemon) send(method, path, body string) (int, []byte) {
	d.t.Helper()
	req, err := http.NewRequest(method, "http://"+d.api+path, bytes.NewBufferString(body))
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s %s: %v", d.name, method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// An acknowledged status survives a clean restart and a crash (issue 12
// item 4: it came back HEALTHY).
func TestStatusSurvivesRestartAndCrash(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, "node", dir)
	code, body := d.send("POST", "/agents", `{"agent_name":"durable","capabilities":{},"transport":{"type":"http","endpoint":"http://127.0.0.1:9"},"skills":[{"skill_id":"s-durable","version":"1.0.0","skill_type":"tool-skill","capabilities":[{"id":"cap.durable","version":"1.0.0"}]}]}`)
	if code != http.StatusOK {
		t.Fatalf("register: %d %s", code, body)
	}
	var reg struct {
		Agent struct {
			AgentID string `json:"agent_id"`
		} `json:"agent"`
	}
	if err := json.Unmarshal(body, &reg); err != nil || reg.Agent.AgentID == "" {
		t.Fatalf("register answer %s: %v", body, err)
	}
	id := reg.Agent.AgentID
	status := func() string {
		var a struct {
			Status string `json:"status"`
		}
		d.getJSON("/agents/"+id+"?local_only=true", &a)
		return a.Status
	}
	for _, step := range []struct {
		set     string
		restart func()
		how     string
	}{
		{"MAINTENANCE", func() { d.stop(); d.start() }, "clean restart"},
		{"DEGRADED", func() { d.kill(); d.start() }, "kill -9"},
	} {
		if code, body := d.send("PUT", "/agents/"+id+"/status", `{"status":"`+step.set+`"}`); code != http.StatusOK {
			t.Fatalf("set %s: %d %s", step.set, code, body)
		}
		step.restart()
		if got := status(); got != step.set {
			t.Fatalf("after a %s the agent is %q, want %q (the acknowledged status was lost)\n%s", step.how, got, step.set, d.out.String())
		}
	}
}
