package simnet

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs 20 nodes for 20 s of virtual time with the default churn
// (a node leaves or joins every second) and the production timers.
func TestSmoke(t *testing.T) {
	bubble(t, func(t *testing.T) {
		s := Scenario{Nodes: 20, Duration: 20 * time.Second, Seed: 1, QueryRate: 10,
			Logger: slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))}
		rep, err := s.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := rep.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		t.Log("\n" + b.String())
		if os.Getenv("SIMNET_JSON") != "" {
			rep.WriteJSON(os.Stdout)
		}
	})
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
