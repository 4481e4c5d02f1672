package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"runtime"
	"time"
)

// envPprof names a loopback address (host:port) where `agentd run` serves
// Go's profiler (net/http/pprof) for as long as it runs: what the CPU and
// heap figures of docs/performance.md were taken with. Loopback only: a
// profile shows the process's memory.
const envPprof = "AGENTD_PPROF"

// startPprof serves the profiler on addr and returns the bound address;
// stop ends it.
func startPprof(addr string, log *slog.Logger) (bound string, stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("%s=%q: %w", envPprof, addr, err)
	}
	if ip, perr := netip.ParseAddr(host); host != "localhost" && (perr != nil || !ip.IsLoopback()) {
		return "", nil, fmt.Errorf("%s=%q: the profiler serves loopback addresses only", envPprof, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", envPprof, err)
	}
	// Lock contention and blocking are sampled too while the profiler
	// serves (/debug/pprof/mutex, /debug/pprof/block): 1 in 20 contended
	// lock events, blocking events of 100 µs or more.
	runtime.SetMutexProfileFraction(20)
	runtime.SetBlockProfileRate(int((100 * time.Microsecond).Nanoseconds()))
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("profiler stopped", "err", err)
		}
	}()
	log.Info("profiler serving", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
