package dht

import (
	"context"
	"errors"
	"fmt"
	"sync"

	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
)

// errValueStoreFull is what a PUT_VALUE of a new key gets from a node that
// stores MaxStoredValues values for others already.
var errValueStoreFull = errors.New("dht value store full")

// boundedValues is the datastore of the DHT values a node stores for
// others: kad-dht's in-memory map, holding at most max keys. kad-dht puts
// no bound on it, and any peer may PUT_VALUE any valid value (an attacker
// mints agent keys for free), so without one a flood of valid values
// fills the memory of the servers it is aimed at for ValueMaxAge. A value
// already stored may always be replaced (a higher seq, a republish); a new
// key is refused while the store is full, until kad-dht's GC removes values
// older than ValueMaxAge.
type boundedValues struct {
	ds.Batching
	max int

	mu sync.Mutex
	n  int // keys stored
}

func newBoundedValues(max int) *boundedValues {
	return &boundedValues{Batching: dssync.MutexWrap(ds.NewMapDatastore()), max: max}
}

// Put stores v under k unless k is new and the store is full.
func (b *boundedValues) Put(ctx context.Context, k ds.Key, v []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	has, err := b.Has(ctx, k)
	if err != nil {
		return err
	}
	if !has && b.n >= b.max {
		return fmt.Errorf("%w: %d values stored", errValueStoreFull, b.n)
	}
	if err := b.Batching.Put(ctx, k, v); err != nil {
		return err
	}
	if !has {
		b.n++
	}
	return nil
}

// Delete removes k.
func (b *boundedValues) Delete(ctx context.Context, k ds.Key) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	has, err := b.Has(ctx, k)
	if err != nil {
		return err
	}
	if err := b.Batching.Delete(ctx, k); err != nil {
		return err
	}
	if has {
		b.n--
	}
	return nil
}

// Batch returns a batch whose writes go through Put and Delete, so they
// are counted and bounded too.
func (b *boundedValues) Batch(context.Context) (ds.Batch, error) {
	return ds.NewBasicBatch(b), nil
}

// len returns the number of values stored.
func (b *boundedValues) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}
