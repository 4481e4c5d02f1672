package store

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/google/uuid"
)

// crashChildEnv switches the test binary into the crash child: it opens a
// store in the directory named by the variable and writes until killed.
const crashChildEnv = "AGENTD_STORE_CRASH_CHILD"

// seqAgent is the agent whose counter the crash child advances.
const seqAgent = "5eb1a2c4-6f0e-4d3b-9a51-0c8f2e7d4b19"

// crashChild acknowledges, one line each on stdout, every write that
// returned: "ack local <id> <seq>", "ack seq <id> <n>", "ack pin <id>".
// Between them it fills the cache (unsynced) so memtables rotate and
// compactions run while it is killed.
func crashChild(dir string) int {
	s, err := Open(Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), MaxEntries: 5000})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	id, err := trust.Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	ack := func(format string, args ...any) {
		_, _ = fmt.Fprintf(out, "ack "+format+"\n", args...)
		_ = out.Flush()
	}
	// Cache records of about 10 KiB, each put 4 times (insert, then
	// refreshes): about 40 KiB of unsynced writes per round.
	pad := strings.Repeat("x", 1000)
	bigSkill := skill("crash", "1.0.0", record.SkillTool, nil)
	for j := range 8 {
		bigSkill.Capabilities = append(bigSkill.Capabilities, record.Capability{ID: "c" + strconv.Itoa(j), Description: pad})
	}
	for i := 0; ; i++ {
		a := &record.Agent{
			AgentID: uuid.NewString(), Capabilities: map[string]string{}, Description: pad,
			Transport: record.Transport{Type: "tcp", Endpoint: "127.0.0.1:1"},
			Skills:    []record.Skill{skill("local", "1.0.0", record.SkillTool, nil, "l")},
			Seq:       uint64(i + 1), IssuedAt: time.Now().UTC().Format(time.RFC3339Nano), TTLSeconds: 3600,
		}
		sa, err := id.Sign(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		c := *a
		c.AgentID = uuid.NewString()
		c.Skills = []record.Skill{bigSkill}
		csa, err := id.Sign(&c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		for range 4 {
			if err := s.Put(ctx, Entry{Record: csa, Source: SourceGossip}); err != nil {
				fmt.Fprintln(os.Stderr, "put:", err)
				return 2
			}
		}
		if err := s.PutLocal(ctx, sa); err != nil {
			fmt.Fprintln(os.Stderr, "put local:", err)
			return 2
		}
		ack("local %s %d", a.AgentID, a.Seq)
		n, err := s.NextSeq(ctx, seqAgent)
		if err != nil {
			fmt.Fprintln(os.Stderr, "next seq:", err)
			return 2
		}
		ack("seq %s %d", seqAgent, n)
		if err := s.PutPin(a.AgentID, trust.Pin{KeyPEM: id.PublicKeyPEM(), FirstSeen: time.Now().UTC()}); err != nil {
			fmt.Fprintln(os.Stderr, "put pin:", err)
			return 2
		}
		ack("pin %s", a.AgentID)
	}
}

// TestCrashKeepsAcknowledgedWrites runs the crash child several times on
// the same directory, SIGKILLs it after a different number of acks each
// time, and checks after each kill that the store opens and holds every
// acknowledged write of every run so far.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	locals := map[string]uint64{} // agent id -> acknowledged seq
	pins := map[string]bool{}
	var lastSeq uint64
	for run, killAfter := range []int{1, 37, 150, 700} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		acks := 0
		for acks < killAfter && sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 3 || f[0] != "ack" {
				t.Fatalf("run %d: child said %q", run, sc.Text())
			}
			switch f[1] {
			case "local":
				n, _ := strconv.ParseUint(f[3], 10, 64)
				locals[f[2]] = n
			case "seq":
				n, _ := strconv.ParseUint(f[3], 10, 64)
				if n <= lastSeq {
					t.Fatalf("run %d: seq %d after %d", run, n, lastSeq)
				}
				lastSeq = n
			case "pin":
				pins[f[2]] = true
			}
			acks++
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, stdout)
		err = cmd.Wait()
		if acks < killAfter {
			t.Fatalf("run %d: child stopped after %d acks: %v\n%s", run, acks, err, stderr.String())
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: child was not killed: %v\n%s", run, err, stderr.String())
		}
		ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
		t.Logf("run %d: killed after %d acks; %d locals, %d pins, seq %d so far; %d tables on disk", run, acks, len(locals), len(pins), lastSeq, len(ssts))
		checkAfterCrash(t, dir, locals, pins, lastSeq)
	}
}

func checkAfterCrash(t *testing.T, dir string, locals map[string]uint64, pins map[string]bool, lastSeq uint64) {
	t.Helper()
	ctx := context.Background()
	s, err := open(Options{Dir: dir, Logger: testLogger(t), MaxEntries: 5000}, false)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	got, err := s.Locals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]uint64{}
	for _, sa := range got {
		have[sa.Agent.AgentID] = sa.Agent.Seq
	}
	for id, seq := range locals {
		if have[id] != seq {
			t.Errorf("acknowledged local registration %s (seq %d) lost", id, seq)
		}
	}
	for id := range pins {
		if _, ok, err := s.GetPin(id); !ok || err != nil {
			t.Errorf("acknowledged pin %s lost: %v", id, err)
		}
	}
	// The counter resumes above every acknowledged value. NextSeq also
	// floors at the wall clock, so compare with the stored value directly.
	if lastSeq > 0 {
		v, err := s.get(seqKey(seqAgent))
		if err != nil {
			t.Fatalf("seq counter lost: %v", err)
		}
		if n, err := decodeU64(v); err != nil || n < lastSeq {
			t.Errorf("seq counter %d below acknowledged %d (%v)", n, lastSeq, err)
		}
	}
	// The cache opened consistently: every entry is queryable by its index.
	all, err := s.Query(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	bySkill, err := s.Query(ctx, Filter{Skill: "crash"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != s.Len() || len(bySkill) != len(all) {
		t.Errorf("cache after crash: Len %d, scan %d, by index %d", s.Len(), len(all), len(bySkill))
	}
}
