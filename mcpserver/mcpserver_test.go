package mcpserver

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A change that reaches the server just before a subscription to it is
// notified: a client of the 2026-07-28 protocol subscribes with a
// subscriptions/listen stream that Subscribe opens without waiting for the
// server, so a client that subscribes and then changes the agent can have
// the change arrive first (TestMCPOverStdio failed so on a loaded
// machine: the change 5 ms before the subscription, no notification).
func TestChangeJustBeforeTheSubscriptionIsNotified(t *testing.T) {
	const uri = AgentURIPrefix + "2f6b1c8e-7d4a-4e3b-9a5c-1d2e3f4a5b6c"
	events, handled := make(chan string), make(chan struct{})
	watch := func(ctx context.Context, ready func(), event func(agentID string)) error {
		ready()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case id := <-events:
				event(id)
				handled <- struct{}{}
			}
		}
	}
	srv := New("test", nil, watch)
	defer srv.Close()
	srv.StartWatch()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ss.Close() }()
	updates := make(chan string, 4)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case updates <- req.Params.URI:
			default:
			}
		},
	})
	cs, err := c.Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	events <- uri[len(AgentURIPrefix):]
	<-handled
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-updates:
		if got != uri {
			t.Fatalf("update of %s, want %s", got, uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a change just before the subscription was not notified")
	}
}
