// Package e2e runs real agentd processes on 127.0.0.1 and drives them
// through the CLI, the way a user would.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
)

var agentdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentd-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentdBin = filepath.Join(dir, "agentd")
	build := exec.Command("go", "build", "-o", agentdBin, "github.com/agentd/agentd/cmd/agentd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build agentd:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuf is a goroutine-safe log buffer.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type daemon struct {
	t    *testing.T
	name string
	dir  string
	data string // data directory when not dir (dir then holds only the API address file)
	args []string
	api  string
	cmd  *exec.Cmd
	out  *syncBuf
	done chan struct{}
}

// startDaemon starts `agentd run` (or another subcommand when args[0] is
// "bootstrap") on loopback with its own data directory.
func startDaemon(t *testing.T, name, dir string, args ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, name: name, dir: dir, args: args}
	d.start()
	t.Cleanup(func() { d.kill() })
	return d
}

func (d *daemon) start() {
	t := d.t
	t.Helper()
	addrFile := filepath.Join(d.dir, "api.addr")
	_ = os.Remove(addrFile)
	data := d.dir
	if d.data != "" {
		data = d.data
	}
	args := append([]string{"run", "--data-dir", data, "--listen", "/ip4/127.0.0.1/tcp/0",
		"--api", "127.0.0.1:0", "--api-addr-file", addrFile, "--no-lan", "--no-port-mapping", "--log-level", "debug"}, d.args...)
	d.out = &syncBuf{}
	d.cmd = exec.Command(agentdBin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(d.cmd, d.done)
	d.api = testutil.WaitAddrFile(t, 20*time.Second, d.name, addrFile, d.done, d.out.String)
}

// stop sends SIGTERM and waits.
func (d *daemon) stop() {
	d.t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		d.t.Fatalf("%s did not stop on SIGTERM:\n%s", d.name, d.out.String())
	}
}

// kill sends SIGKILL (a crash) and waits.
func (d *daemon) kill() {
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Kill()
	<-d.done
}

// health reads GET /healthz.
func (d *daemon) health() map[string]any {
	d.t.Helper()
	var h map[string]any
	d.getJSON("/healthz", &h)
	return h
}

func (d *daemon) getJSON(path string, v any) {
	d.t.Helper()
	resp, err := http.Get("http://" + d.api + path)
	if err != nil {
		d.t.Fatalf("%s %s: %v", d.name, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		d.t.Fatalf("%s %s: %v", d.name, path, err)
	}
}

// metric returns the value of a Prometheus sample (name{labels}) or 0.
func (d *daemon) metric(sample string) float64 {
	d.t.Helper()
	resp, err := http.Get("http://" + d.api + "/metrics")
	if err != nil {
		d.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, sample+" ") {
			var v float64
			if _, err := fmt.Sscanf(strings.TrimPrefix(line, sample+" "), "%g", &v); err != nil {
				d.t.Fatalf("%s: metric %q: %v", d.name, line, err)
			}
			return v
		}
	}
	return 0
}

type result struct {
	code           int
	stdout, stderr string
}

// cli runs an agentd client command.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	return runAgentd(t, nil, args...)
}

// runAgentd runs the agentd binary with args (after prefix, e.g. ip netns
// exec NAME) for at most 30 s, and returns its exit code and output.
func runAgentd(t *testing.T, prefix []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := append(append(slices.Clone(prefix), agentdBin), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v agentd %v: %v", prefix, args, err)
	}
	return r
}

var eventually = testutil.Eventually

// repoFile returns a path inside the repository.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startBootstrap runs `agentd bootstrap` and returns its first multiaddr.
func startBootstrap(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(agentdBin, "bootstrap", "--data-dir", dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--no-port-mapping", "--api", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("bootstrap node exited:\n%s", logs.String())
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatalf("bootstrap node printed no address:\n%s", logs.String())
	}
	return ""
}
