package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// result is the outcome of one in-process agentd invocation.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs agentd with args (without the program name) in-process.
func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := execute(context.Background(), append([]string{"agentd"}, args...), strings.NewReader(stdin), &out, &errb)
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	if testing.Verbose() {
		t.Logf("agentd %s → %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// mustRun runs agentd and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := runCLI(t, "", args...)
	if r.code != 0 {
		t.Fatalf("agentd %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// logWriter sends each line written to it to t.Log; the daemon's slog
// output goes there.
type logWriter struct {
	t  *testing.T
	mu sync.Mutex
	b  bytes.Buffer
	// all keeps everything written, for assertions.
	all bytes.Buffer
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.b.Write(p)
	for {
		line, err := w.b.ReadString('\n')
		if err != nil {
			w.b.WriteString(line)
			break
		}
		w.t.Log(strings.TrimRight(line, "\n"))
	}
	return len(p), nil
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}
