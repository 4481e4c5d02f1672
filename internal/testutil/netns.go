//go:build linux

package testutil

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// netnsSeq makes namespace names unique, so tests can run in parallel.
var netnsSeq atomic.Int64

// Netns is a network namespace created by a test and deleted when the test
// ends.
type Netns struct {
	// Name is the namespace's name (ip netns exec Name …).
	Name string
	fd   int
}

// NewNetns creates a namespace named name-<pid>-<n> (or name itself when
// short is true: interface names built from it must stay within 15
// bytes), or skips the test loudly when the environment cannot (not root,
// no ip(8), no namespaces). what names the test in the skip message.
func NewNetns(t *testing.T, name, what string, short bool) *Netns {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipEnv(t, "SKIP (environment): network namespaces need root; %s did not run", what)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		SkipEnv(t, "SKIP (environment): ip(8) from iproute2 is not installed; %s did not run", what)
	}
	if !short {
		name = fmt.Sprintf("%s-%d-%d", name, os.Getpid(), netnsSeq.Add(1))
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		SkipEnv(t, "SKIP (environment): cannot create a network namespace (%v: %s); %s did not run", err, strings.TrimSpace(string(out)), what)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	fd, err := unix.Open("/var/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open namespace %s: %v", name, err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	return &Netns{Name: name, fd: fd}
}

// Exec runs a command inside the namespace and fails the test if it fails.
func (ns *Netns) Exec(t testing.TB, args ...string) {
	t.Helper()
	full := append([]string{"netns", "exec", ns.Name}, args...)
	if out, err := exec.Command("ip", full...).CombinedOutput(); err != nil {
		t.Fatalf("%s in %s: %v: %s", strings.Join(args, " "), ns.Name, err, out)
	}
}

// IP runs ip(8) inside the namespace.
func (ns *Netns) IP(t testing.TB, args ...string) {
	t.Helper()
	ns.Exec(t, append([]string{"ip"}, args...)...)
}

// Do runs f on an OS thread switched into the namespace. Sockets created
// there stay in the namespace when used from any thread.
func (ns *Netns) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: if switching back failed it must
		// die with the goroutine rather than serve others.
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer func() { _ = unix.Close(self) }()
		if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// HTTPClient is an HTTP client whose connections are made inside the
// namespace, so that it reaches the loopback API of a daemon there.
func (ns *Netns) HTTPClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		DisableKeepAlives: true,
	}}
}

// ServeDNS serves h on pc (github.com/miekg/dns, in the module graph
// through go-libp2p) until the test ends.
func ServeDNS(t testing.TB, pc net.PacketConn, h dns.Handler) {
	t.Helper()
	srv := &dns.Server{PacketConn: pc, Handler: h}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() {
		_ = srv.Shutdown()
		if err := <-done; err != nil {
			t.Errorf("DNS server: %v", err)
		}
	})
}

// WaitAddrFile waits until a daemon started with --api-addr-file has
// written its address (a line) to file, and returns it. exited closes
// when the process ends; logs gives its output for the failure message.
func WaitAddrFile(t testing.TB, within time.Duration, name, file string, exited <-chan struct{}, logs func() string) string {
	t.Helper()
	var addr string
	Eventually(t, within, name+" writing its API address", func() bool {
		select {
		case <-exited:
			t.Fatalf("%s exited early:\n%s", name, logs())
		default:
		}
		b, err := os.ReadFile(file)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		addr = strings.TrimSpace(string(b))
		return true
	})
	return addr
}
