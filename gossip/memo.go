package gossip

import (
	"crypto/sha256"
	"sync"

	"github.com/agentd/agentd/record"
)

// A recordMemo generation holds at most syncMemoGeneration records and
// syncMemoBytes of their bytes: a node's shard syncs carry the agents of
// its interest again and again (every shard it joins, from up to three
// peers), a few hundred at most; the byte bound keeps what a peer that
// answers with large records can make the memo hold past the views'
// copies (two generations, ~0.5 MiB of records) small.
const (
	syncMemoGeneration = 128
	syncMemoBytes      = 256 << 10
)

// recordMemo remembers the records sync answers carried, by the SHA-256
// of their bytes in the answer, so that the same bytes from another peer
// or another sync are not decoded again: a node that joins a shard
// usually holds most of its agents already (they offer capabilities of
// its other shards), and decoding a record — JSON, JCS, the agent's
// structure — was most of a sync's cost (docs/scaling.md). Identical
// bytes decode to the same record or fail the same way; only successes
// are kept, and the record's signatures and the policy are still checked
// on every answer (absorb). Records are never changed once decoded, so a
// memo entry is shared by every answer that carries it.
//
// Two generations: a lookup searches both, a new entry goes to the
// current one, and a full current generation replaces the old. Safe for
// concurrent use.
type recordMemo struct {
	mu       sync.Mutex
	cur, old map[[32]byte]*record.SignedAgent
	curBytes int // bytes of the records in cur
}

func newRecordMemo() *recordMemo {
	return &recordMemo{cur: make(map[[32]byte]*record.SignedAgent, syncMemoGeneration)}
}

// decode is decodeAnnounce, answered from the memo for bytes it decoded
// before. A nil memo decodes every time.
func (m *recordMemo) decode(raw []byte) (*record.SignedAgent, error) {
	if m == nil || len(raw) > syncRecordAllowance {
		return decodeAnnounce(raw)
	}
	k := sha256.Sum256(raw)
	m.mu.Lock()
	sa, ok := m.cur[k]
	if !ok {
		sa, ok = m.old[k]
	}
	m.mu.Unlock()
	if ok {
		return sa, nil
	}
	sa, err := decodeAnnounce(raw)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.cur) >= syncMemoGeneration || m.curBytes+len(raw) > syncMemoBytes {
		m.old, m.cur, m.curBytes = m.cur, make(map[[32]byte]*record.SignedAgent, syncMemoGeneration), 0
	}
	m.cur[k] = sa
	m.curBytes += len(raw)
	return sa, nil
}
