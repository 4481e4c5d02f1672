package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/agentd/agentd/bootstrap"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/p2p"
)

// The daemon itself is package daemon (`agentd run` is daemon.Run); these
// are the pieces of it the other commands share.

// DBDir is the Badger directory inside the data directory.
const DBDir = daemon.DBDir

func nodeConfig(ctx context.Context, cfg config.Config, log *slog.Logger) (node.Config, error) {
	return daemon.NodeConfig(ctx, cfg, log)
}

func resolveBootstrap(ctx context.Context, list bootstrap.List, log *slog.Logger) []peer.AddrInfo {
	return daemon.ResolveBootstrap(ctx, list, log)
}

func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return daemon.NewHTTPServer(h, log)
}

func closeWithin(ctx context.Context, close func(context.Context) error) error {
	return daemon.CloseWithin(ctx, close)
}

func listenAPI(addr string) (net.Listener, error) { return daemon.ListenAPI(addr) }

func natConfig(c config.NATConfig, relays []peer.AddrInfo, relayService bool) (p2p.NAT, error) {
	return daemon.NATConfig(c, relays, relayService)
}

// writeFileAtomic is fsutil.WriteFileAtomic: synced, so a crash never
// leaves a half-written record, manifest or address file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	return fsutil.WriteFileAtomic(path, data, mode)
}
