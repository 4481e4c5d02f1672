package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// simnetCmd runs `agentd simnet` with args and returns its exit code,
// stdout and stderr.
func simnetCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(agentdBin, append([]string{"simnet"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("simnet %v: %v", args, err)
	return 0, "", ""
}

// TestSimnetVirtualClock: the default clock runs a 20-second churn
// scenario in virtual time (in well under 20 s of wall time on an idle
// machine, though nothing here depends on it), writes the report, and
// exits 0; the same run with impossible thresholds exits 1 saying why.
func TestSimnetVirtualClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := simnetCmd(t, "--nodes", "8", "--duration", "20s", "--churn-interval", "5s", "--churn-fraction", "0.25",
		"--query-rate", "10", "--min-recall", "0.9", "--max-stale", "0.05", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{"simnet: churn, 8 nodes (+3 bootstrap), 20s, seed 1", "clock: virtual", "PASS: recall ≥ 0.9", "wall time:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// Progress lines carry the run's elapsed time, not the bubble's clock.
	if !strings.Contains(stderr, "simnet progress") || strings.Contains(stderr, "time=2000-") {
		t.Errorf("progress lines:\n%s", stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Clock   string `json:"clock"`
		Queries struct {
			Scored int     `json:"scored"`
			Recall float64 `json:"recall"`
		} `json:"queries"`
		Churn struct {
			Left, Crashed int
		} `json:"churn"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Clock != "virtual" || rep.Queries.Scored == 0 || rep.Churn.Left+rep.Churn.Crashed == 0 {
		t.Fatalf("report: %+v", rep)
	}

	code, _, stderr = simnetCmd(t, "--nodes", "4", "--duration", "2s", "--scenario", "steady", "--query-rate", "10", "--min-recall", "1.01")
	if code != 2 || !strings.Contains(stderr, "--min-recall must be between 0 and 1") {
		t.Fatalf("usage error: exit %d, stderr %s", code, stderr)
	}
	code, stdout, stderr = simnetCmd(t, "--nodes", "4", "--duration", "1s", "--scenario", "steady", "--query-rate", "0.01", "--quiet")
	if code != 1 || !strings.Contains(stderr, "agentd simnet: FAIL: no query had a live provider") || !strings.Contains(stdout, "FAIL:") {
		t.Fatalf("threshold failure: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// TestSimnetVirtualInterrupt: SIGINT stops a long virtual-time run; it
// prints the partial report and exits 1.
func TestSimnetVirtualInterrupt(t *testing.T) {
	cmd := exec.Command(agentdBin, "simnet", "--nodes", "6", "--duration", "1h", "--scenario", "steady", "--query-rate", "5")
	var out, errb syncBuf
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // if the test fails before the run ends
	eventually(t, 60*time.Second, "the run to start", func() bool { return strings.Contains(out.String()+errb.String(), "phase=run") })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("SIGINT did not stop the run\nstderr: %s", errb.String())
	}
	if !strings.Contains(out.String(), "DISCOVERY") || !strings.Contains(out.String()+errb.String(), "interrupted") {
		t.Fatalf("no partial report\nstdout: %s\nstderr: %s", out.String(), errb.String())
	}
}
