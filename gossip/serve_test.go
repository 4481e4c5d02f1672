package gossip

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus/testutil"

	agentdtest "github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// TestRequestAdmissionBusy: a host with every slot of a stream protocol
// taken answers ErrUnavailable, counts it, and serves again once a slot
// is free — for sync and heartbeat pulls alike.
func TestRequestAdmissionBusy(t *testing.T) {
	bubble(t, func(t *testing.T) {
		_, cfg := pullConfig()
		cfg.SyncServeConcurrency, cfg.PullServeConcurrency = 1, 1
		tn := newTestNet(t, 2, cfg)
		a, b := tn.nodes[0], tn.nodes[1]
		tn.connect(a, b)

		a.g.serveSem <- struct{}{}
		a.g.pullSem <- struct{}{}
		if _, err := b.g.Sync(tn.ctx); !errors.Is(err, ErrSyncRefused) || !strings.Contains(err.Error(), record.CodeServiceUnavailable) {
			t.Fatalf("Sync of a busy host = %v, want ErrUnavailable", err)
		}
		if got := rejects(t, a.m, "sync", "busy"); got != 1 {
			t.Errorf("sync busy = %v, want 1", got)
		}
		if _, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID}); !errors.Is(err, ErrPullRefused) || !strings.Contains(err.Error(), record.CodeServiceUnavailable) {
			t.Fatalf("Pull of a busy host = %v, want ErrUnavailable", err)
		}
		if got := testutil.ToFloat64(a.m.PullsServed.WithLabelValues("busy")); got != 1 {
			t.Errorf("pulls served busy = %v, want 1", got)
		}

		<-a.g.serveSem
		<-a.g.pullSem
		if _, err := b.g.Sync(tn.ctx); err != nil {
			t.Fatalf("Sync once a slot is free: %v", err)
		}
		if _, err := b.g.Pull(tn.ctx, a.h.ID(), []string{a.id.AgentID}); err != nil {
			t.Fatalf("Pull once a slot is free: %v", err)
		}
		// The asker has its answer before the host's handler returns.
		agentdtest.EventuallyEvery(t, time.Second, 10*time.Millisecond, "served requests freed their slots", func() bool {
			return len(a.g.serveSem)+len(a.g.pullSem) == 0
		})
	})
}

// TestSyncServesMalformedRequests: a bad sync request gets the seed's
// error code and is counted, and the host keeps serving.
func TestSyncServesMalformedRequests(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 2, testConfig())
		a, b := tn.nodes[0], tn.nodes[1]
		tn.connect(a, b)
		ask := func(body string) string {
			return tn.askFrame(b, a, protocol.ID(ScopedSyncProtocol), body, syncAnswerBound(1))
		}
		if got := ask(`[1,`); !strings.Contains(got, record.CodeMalformedPayload) {
			t.Fatalf("answer to [1, = %s", got)
		}
		if got := ask(`{"protocol_version":"v9.0","limit":1}`); !strings.Contains(got, record.CodeUnsupportedVersion) {
			t.Fatalf("answer to v9.0 = %s", got)
		}
		if got := rejects(t, a.m, "sync", string(trust.ReasonMalformed)); got != 1 {
			t.Errorf("sync malformed rejects = %v, want 1", got)
		}
		if got := rejects(t, a.m, "sync", string(trust.ReasonVersion)); got != 1 {
			t.Errorf("sync unsupported_version rejects = %v, want 1", got)
		}
		if _, err := b.g.Sync(tn.ctx); err != nil {
			t.Fatalf("Sync after bad requests: %v", err)
		}
	})
}
