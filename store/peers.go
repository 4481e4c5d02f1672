package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// PutPeer adds or refreshes an address-book entry. A zero LastSeen means
// now; LastSeen never moves back. Non-empty Addrs replace the stored ones
// (duplicates and addresses over 1 KiB dropped, at most 32 kept); empty
// Addrs keep them. Beyond MaxPeers the least recently seen peers are
// evicted.
func (s *db) PutPeer(ctx context.Context, p PeerRecord) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if p.ID == "" {
		return &record.FieldError{Field: "id", Reason: "is required"}
	}
	if err := p.ID.Validate(); err != nil {
		return &record.FieldError{Field: "id", Reason: err.Error()}
	}
	now := s.opts.Now()
	if p.LastSeen.IsZero() {
		p.LastSeen = now
	}
	p.LastSeen = p.LastSeen.Round(0).UTC()
	if p.LastSeen.Before(minTime) || p.LastSeen.After(maxTime) {
		return &record.FieldError{Field: "last_seen", Reason: "must be between 1970 and 2262"}
	}
	addrs := make([]ma.Multiaddr, 0, min(len(p.Addrs), maxPeerAddrs))
	for _, a := range p.Addrs {
		if len(a) == 0 || len(a.Bytes()) > maxAddrBytes || ma.Contains(addrs, a) {
			continue
		}
		if addrs = append(addrs, a); len(addrs) == maxPeerAddrs {
			break
		}
	}
	p.Addrs = addrs

	s.mu.Lock()
	defer s.mu.Unlock()
	_, known := s.peers[p.ID]
	var evict []peer.ID
	if !known && len(s.peers) >= s.opts.MaxPeers {
		evict = s.oldestPeersLocked(len(s.peers)-s.opts.MaxPeers+1, p.ID)
	}
	err := s.write(func(w writer) error {
		if known {
			// Merge with the stored entry; a corrupt one is replaced.
			if old, err := readPeer(w, p.ID); err == nil {
				if old.LastSeen.After(p.LastSeen) {
					p.LastSeen = old.LastSeen
				}
				if len(p.Addrs) == 0 {
					p.Addrs = old.Addrs
				}
			}
		}
		v, err := encodePeer(p)
		if err != nil {
			return fmt.Errorf("encode peer %s: %w", p.ID, err)
		}
		for _, id := range evict {
			if err := w.Delete(peerKey(id)); err != nil {
				return err
			}
		}
		return w.Set(peerKey(p.ID), v, 0)
	})
	if err != nil {
		return fmt.Errorf("put peer %s: %w", p.ID, err)
	}
	for _, id := range evict {
		delete(s.peers, id)
	}
	s.peers[p.ID] = p.LastSeen
	return nil
}

// oldestPeersLocked returns the n least recently seen peers other than
// except.
func (s *db) oldestPeersLocked(n int, except peer.ID) []peer.ID {
	ids := make([]peer.ID, 0, len(s.peers))
	for id := range s.peers {
		if id != except {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b peer.ID) int {
		if c := s.peers[a].Compare(s.peers[b]); c != 0 {
			return c
		}
		return strings.Compare(string(a), string(b))
	})
	return ids[:min(n, len(ids))]
}

func readPeer(r reader, id peer.ID) (PeerRecord, error) {
	v, err := r.Get(peerKey(id))
	if err != nil {
		return PeerRecord{}, err
	}
	p, err := decodePeer(v)
	if err != nil {
		return PeerRecord{}, err
	}
	if p.ID != id {
		return PeerRecord{}, fmt.Errorf("%w: entry of %s stored under %s", errCorrupt, p.ID, id)
	}
	return p, nil
}

// Peers lists the address book, most recently seen first (then by id).
func (s *db) Peers(ctx context.Context) ([]PeerRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	var out []PeerRecord
	err := s.scan(ctx, []byte(spacePeer), true, func(k, v []byte) error {
		p, err := decodePeer(v)
		if err != nil || string(peerKey(p.ID)) != string(k) {
			s.log.Warn("skip corrupt address-book entry", "key", fmt.Sprintf("%.80q", k), "err", err)
			return nil
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	slices.SortFunc(out, func(a, b PeerRecord) int {
		if c := b.LastSeen.Compare(a.LastSeen); c != 0 {
			return c
		}
		return strings.Compare(string(a.ID), string(b.ID))
	})
	return out, nil
}

// loadPeers rebuilds the address-book index (peer → last seen) at Open,
// deleting corrupt entries and evicting beyond MaxPeers.
func (s *db) loadPeers(ctx context.Context) error {
	var bad [][]byte
	err := s.scan(ctx, []byte(spacePeer), true, func(k, v []byte) error {
		p, err := decodePeer(v)
		if err != nil || string(peerKey(p.ID)) != string(k) {
			s.log.Warn("drop corrupt address-book entry", "key", fmt.Sprintf("%.80q", k), "err", err)
			bad = append(bad, k)
			return nil
		}
		s.peers[p.ID] = p.LastSeen
		return nil
	})
	if err != nil {
		return fmt.Errorf("load address book: %w", err)
	}
	var evict []peer.ID
	if len(s.peers) > s.opts.MaxPeers {
		evict = s.oldestPeersLocked(len(s.peers)-s.opts.MaxPeers, "")
	}
	if len(bad) == 0 && len(evict) == 0 {
		return nil
	}
	for _, id := range evict {
		delete(s.peers, id)
		bad = append(bad, peerKey(id))
	}
	return s.write(func(w writer) error {
		for _, k := range bad {
			if err := w.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}
