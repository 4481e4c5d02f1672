package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/simnet"
)

func TestSimnetUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simnet", "extra"}, "simnet takes no arguments"},
		{[]string{"simnet", "--scenario", "storm"}, `"storm" is not one of churn, partition, massjoin, steady`},
		{[]string{"simnet", "--query-rate", "0"}, "--query-rate must be positive"},
		{[]string{"simnet", "--min-recall", "2"}, "--min-recall must be between 0 and 1"},
		{[]string{"simnet", "--max-stale", "-1"}, "--max-stale must be between 0 and 1"},
		{[]string{"simnet", "--churn-fraction", "0"}, "--churn-fraction must be positive for the churn scenario"},
		{[]string{"simnet", "--nodes", "1"}, "nodes is 1; must be between 2"},
		{[]string{"simnet", "--latency", "2ms", "--jitter", "5ms"}, "jitter is 5ms; must not exceed the latency 2ms"},
		{[]string{"simnet", "--bandwidth", "-5"}, "bandwidth"},
		{[]string{"simnet", "--clock", "wall"}, `--clock: "wall" is not one of virtual, real`},
		{[]string{"simnet", "--mesh-degree", "1"}, "--mesh-degree: mesh degree 1 must be between 2 and 32"},
		{[]string{"simnet", "--flood-publish=false", "--mesh-degree", "33"}, "--mesh-degree: mesh degree 33 must be between 2 and 32"},
		{[]string{"simnet", "--heartbeat-interval", "0s"}, "--heartbeat-interval must be positive (got 0s)"},
		{[]string{"simnet", "--liveness-timeout", "-1s"}, "--liveness-timeout must be positive (got -1s)"},
		{[]string{"simnet", "--heartbeat-interval", "5ms"}, "heartbeat interval is 5ms; must be between 10ms and 24h0m0s"},
		{[]string{"simnet", "--heartbeat-interval", "1m"}, "liveness timeout is 30s; must be at least the heartbeat interval 1m0s"},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("agentd %s: exit %d, want %d and %q\nstderr: %s", strings.Join(tc.args, " "), r.code, exitUsage, tc.want, r.stderr)
		}
	}
	// Without --jitter, a small latency takes a jitter that fits.
	c := runCLI(t, "", "simnet", "--help")
	if c.code != exitOK || !strings.Contains(c.stdout, "--min-recall") || !strings.Contains(c.stdout, "docs/simnet.md") {
		t.Fatalf("help: %d %s", c.code, c.stdout)
	}
}

// TestSimnetRun runs six nodes for three seconds in real time. (A
// virtual-time run exits its process: internal/e2e runs those.)
func TestSimnetRun(t *testing.T) {
	dir := t.TempDir()
	jsonPath, svgPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	r := runCLI(t, "", "simnet", "--clock", "real", "--scenario", "steady", "--nodes", "6", "--duration", "3s", "--latency", "5ms",
		"--query-rate", "20", "--min-recall", "0", "--max-stale", "1", "--mesh-degree", "4", "--flood-publish=false", "--heartbeat-interval", "1s", "--liveness-timeout", "6s", "--json", jsonPath, "--svg", svgPath)
	if r.code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"simnet: steady, 6 nodes (+3 bootstrap), 3s, seed 1", "clock: real", "gossip: mesh degree 4, flood publishing off", "heartbeat 1s, liveness timeout 6s;", "DISCOVERY", "recall", "PASS: recall ≥ 0 and stale rate ≤ 1", "wall time:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	// stderr is not a terminal: progress comes as log lines.
	if !strings.Contains(r.stderr, "simnet progress") {
		t.Errorf("no progress lines on stderr:\n%s", r.stderr)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep simnet.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	wantCmd := "agentd simnet --scenario steady --clock real --nodes 6 --duration 3s --latency 5ms --mesh-degree 4 --flood-publish false --heartbeat-interval 1s --liveness-timeout 6s --query-rate 20 --min-recall 0 --max-stale 1"
	if rep.Command != wantCmd || rep.Clock != "real" || rep.Scenario.Nodes != 6 || rep.Queries.Issued == 0 || rep.Thresholds == nil {
		t.Fatalf("json report: command %q, %+v", rep.Command, rep.Queries)
	}
	if rep.Scenario.MeshDegree != 4 || rep.Scenario.FloodPublish {
		t.Errorf("json report: mesh degree %d, flood publishing %v; the run asked for 4 and off", rep.Scenario.MeshDegree, rep.Scenario.FloodPublish)
	}
	if rep.Scenario.HeartbeatInterval != 1 || rep.Scenario.LivenessTimeoutS != 6 || rep.Scenario.StaleAfterS != 6 {
		t.Errorf("json report: heartbeat %gs, liveness timeout %gs, stale after %gs; the run asked for 1s and 6s", rep.Scenario.HeartbeatInterval, rep.Scenario.LivenessTimeoutS, rep.Scenario.StaleAfterS)
	}
	f, err := os.Open(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	dec := xml.NewDecoder(f)
	for {
		if _, err := dec.Token(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("svg: %v", err)
			}
			break
		}
	}
}

// TestSimnetThresholdFailure: the seed-1 schedule of a one-second run at
// 0.01 queries per second holds no query, so recall is unmeasured and the
// run must fail with exit code 1, saying why.
func TestSimnetThresholdFailure(t *testing.T) {
	_, _, sched, err := simnet.Scenario{Kind: simnet.KindSteady, Nodes: 4, Duration: time.Second, QueryRate: 0.01, Seed: 1}.Plan()
	if err != nil || sched.Count(simnet.EventQuery) != 0 {
		t.Fatalf("premise: %v, %d queries", err, sched.Count(simnet.EventQuery))
	}
	r := runCLI(t, "", "simnet", "--clock", "real", "--scenario", "steady", "--nodes", "4", "--duration", "1s", "--query-rate", "0.01", "--quiet")
	if r.code != exitFailed {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitFailed, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "agentd simnet: FAIL: no query had a live provider") || !strings.Contains(r.stdout, "FAIL:") {
		t.Fatalf("failure not explained\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "simnet progress") {
		t.Fatalf("--quiet printed progress:\n%s", r.stderr)
	}
}
