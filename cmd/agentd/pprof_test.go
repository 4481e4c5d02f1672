package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestPprofLoopbackOnly(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:6060", "example.com:6060", "nonsense"} {
		if _, _, err := startPprof(addr, log); err == nil || !strings.Contains(err.Error(), envPprof) {
			t.Fatalf("%s: %v", addr, err)
		}
	}
	addr, stop, err := startPprof("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "goroutine") {
		t.Fatalf("index: %d %.100s", resp.StatusCode, b)
	}
}
