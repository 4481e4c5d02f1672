package dht

import (
	"context"
	"errors"
	"testing"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	ds "github.com/ipfs/go-datastore"
	lprecord "github.com/libp2p/go-libp2p-record"
)

// The value store holds at most max keys: a new key beyond it is refused,
// a stored one may be replaced, and a delete (kad-dht's GC, a discarded
// bad record) or a batch frees and counts the same way.
func TestBoundedValues(t *testing.T) {
	ctx := context.Background()
	b := newBoundedValues(2)
	k1, k2, k3 := ds.NewKey("/agentd/1"), ds.NewKey("/agentd/2"), ds.NewKey("/agentd/3")
	for _, k := range []ds.Key{k1, k2} {
		if err := b.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Put(ctx, k3, []byte("v")); !errors.Is(err, errValueStoreFull) {
		t.Fatalf("third key: %v, want errValueStoreFull", err)
	}
	if has, _ := b.Has(ctx, k3); has {
		t.Fatal("a refused value was stored")
	}
	if err := b.Put(ctx, k1, []byte("v2")); err != nil {
		t.Fatalf("replacing a stored value: %v", err)
	}
	if got, err := b.Get(ctx, k1); err != nil || string(got) != "v2" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if b.len() != 2 {
		t.Fatalf("%d stored, want 2", b.len())
	}
	if err := b.Delete(ctx, k2); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, k2); err != nil { // absent: not counted twice
		t.Fatal(err)
	}
	if b.len() != 1 {
		t.Fatalf("%d stored after a delete, want 1", b.len())
	}
	batch, err := b.Batch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []ds.Key{k2, k3} {
		if err := batch.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Commit(ctx); !errors.Is(err, errValueStoreFull) {
		t.Fatalf("batch over the bound: %v, want errValueStoreFull", err)
	}
	if b.len() != 2 {
		t.Fatalf("%d stored after the batch, want 2", b.len())
	}
}

// A peer that puts valid values of freshly minted agents to a node fills
// it up to MaxStoredValues and no further: the next new key is refused over
// the wire, while a value it already holds can still be replaced.
func TestStoredValuesBoundedOverTheWire(t *testing.T) {
	c := newCluster(t, 2, 0, func(i int, cfg *Config) {
		if i == 1 {
			cfg.MaxStoredValues = 2
		}
	})
	_, pm, err := c.nodes[0].d.running()
	if err != nil {
		t.Fatal(err)
	}
	target := c.nodes[1].h.ID()
	put := func(sa *record.SignedAgent) error {
		rec := lprecord.MakePutRecord(ValueKey(sa.Agent.AgentID), sa.MarshalAnnounce())
		return pm.PutValue(context.Background(), target, rec)
	}
	var first *trust.Identity
	for i := range 3 {
		id := mustIdentity(t)
		if i == 0 {
			first = id
		}
		err := put(signedAgent(t, id, 1, skillSpec{"skill-f": {"cap-f"}}))
		if i < 2 && err != nil {
			t.Fatalf("value %d refused below the bound: %v", i, err)
		}
		if i == 2 && err == nil {
			t.Fatal("a third new value was stored beyond MaxStoredValues = 2")
		}
	}
	if err := put(signedAgent(t, first, 2, skillSpec{"skill-f": {"cap-f"}})); err != nil {
		t.Fatalf("replacing a stored value: %v", err)
	}
}
