package lan

import (
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The TXT summary of an agentd DNS-SD instance (RFC 6763 §6): short keys,
// one key=value per string. It is an unsigned pointer to the full signed
// record, which a browser fetches over /agentd/record/1.0.0 from peer and
// accepts only if it verifies and its hash is h (or its seq is newer).
//
//	txtvers=1
//	pv=v1.0                  protocol_version
//	id=<agent_id>
//	peer=<peer_id>           the libp2p peer hosting the record
//	h=<base64url SHA-256 of the record's RFC 8785 canonical bytes, no padding>
//	seq=<record seq>
//	caps=<cap,cap,...>       the capability ids, only when the whole list fits
const (
	TXTVersion = "1"
	// MaxTXTBytes bounds the TXT data agentd publishes (each string plus
	// its length byte); RFC 6763 §6.2 recommends staying under 400.
	MaxTXTBytes = 400
	// MaxTXTString is the DNS limit of one TXT string.
	MaxTXTString = 255
	// maxTXTParse bounds the TXT data a browser reads (the rest of a
	// 9000-byte mDNS packet is ignored).
	maxTXTParse = 1300
)

// Summary is the parsed TXT summary.
type Summary struct {
	ProtocolVersion string
	AgentID         string
	PeerID          string
	Hash            [32]byte
	Seq             uint64
	// Capabilities are the capability ids; nil when they did not fit.
	Capabilities []string
}

// ErrTXT is wrapped by every TXT summary parse error.
var ErrTXT = errors.New("invalid TXT summary")

var seqRe = regexp.MustCompile(`^(0|[1-9][0-9]{0,15})$`)

// SummaryOf returns the summary of a record.
func SummaryOf(sa *record.SignedAgent) Summary {
	pv := sa.ProtocolVersion
	if pv == "" {
		pv = record.ProtocolVersion
	}
	return Summary{
		ProtocolVersion: pv,
		AgentID:         sa.Agent.AgentID,
		PeerID:          sa.Agent.PeerID,
		Hash:            sa.Hash(),
		Seq:             sa.Agent.Seq,
		Capabilities:    sa.Agent.AllCapabilities(),
	}
}

// TXT returns the TXT strings. The capability list is included only when
// it fits in one string and the total stays within MaxTXTBytes; the
// summary's Capabilities are not changed.
func (s Summary) TXT() ([]string, error) {
	txt := []string{
		"txtvers=" + TXTVersion,
		"pv=" + s.ProtocolVersion,
		"id=" + s.AgentID,
		"peer=" + s.PeerID,
		"h=" + base64.RawURLEncoding.EncodeToString(s.Hash[:]),
		"seq=" + strconv.FormatUint(s.Seq, 10),
	}
	total := 0
	for _, t := range txt {
		if len(t) > MaxTXTString {
			return nil, fmt.Errorf("%w: %q is longer than %d bytes", ErrTXT, t[:min(len(t), 16)]+"…", MaxTXTString)
		}
		total += len(t) + 1
	}
	if total > MaxTXTBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTXT, total, MaxTXTBytes)
	}
	if len(s.Capabilities) > 0 {
		caps := "caps=" + strings.Join(s.Capabilities, ",")
		if len(caps) <= MaxTXTString && total+len(caps)+1 <= MaxTXTBytes {
			txt = append(txt, caps)
		}
	}
	return txt, nil
}

// TXTSize is the size of TXT data on the wire: each string plus its
// length byte.
func TXTSize(txt []string) int {
	n := 0
	for _, t := range txt {
		n += len(t) + 1
	}
	return n
}

// ParseTXT parses a TXT summary. As RFC 6763 §6.4 says, keys are
// case-insensitive, the first occurrence of a key wins, unknown keys and
// strings without '=' are ignored. txtvers (1), id, peer, h and seq are
// required; pv, when present, must be a protocol version this node speaks.
func ParseTXT(txt []string) (Summary, error) {
	var s Summary
	seen := map[string]string{}
	total := 0
	for _, t := range txt {
		total += len(t) + 1
		if total > maxTXTParse {
			return s, fmt.Errorf("%w: more than %d bytes", ErrTXT, maxTXTParse)
		}
		k, v, ok := strings.Cut(t, "=")
		if !ok || k == "" {
			continue
		}
		k = strings.ToLower(k)
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = v
	}
	need := func(k string) (string, error) {
		v, ok := seen[k]
		if !ok {
			return "", fmt.Errorf("%w: %s is missing", ErrTXT, k)
		}
		return v, nil
	}
	v, err := need("txtvers")
	if err != nil {
		return s, err
	}
	if v != TXTVersion {
		return s, fmt.Errorf("%w: txtvers %q is not %s", ErrTXT, clip(v), TXTVersion)
	}
	s.ProtocolVersion = record.ProtocolVersion
	if pv, ok := seen["pv"]; ok {
		if _, err := record.CheckVersion(pv); err != nil {
			return s, fmt.Errorf("%w: pv: %w", ErrTXT, err)
		}
		s.ProtocolVersion = pv
	}
	if s.AgentID, err = need("id"); err != nil {
		return s, err
	}
	if err := record.ValidateAgentID(s.AgentID); err != nil {
		return s, fmt.Errorf("%w: id: %w", ErrTXT, err)
	}
	if s.PeerID, err = need("peer"); err != nil {
		return s, err
	}
	if p, err := peer.Decode(s.PeerID); err != nil || p.String() != s.PeerID {
		return s, fmt.Errorf("%w: peer %q is not a libp2p peer id", ErrTXT, clip(s.PeerID))
	}
	h, err := need("h")
	if err != nil {
		return s, err
	}
	hb, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil || len(hb) != 32 || base64.RawURLEncoding.EncodeToString(hb) != h {
		return s, fmt.Errorf("%w: h %q is not the unpadded base64url of 32 bytes", ErrTXT, clip(h))
	}
	copy(s.Hash[:], hb)
	sq, err := need("seq")
	if err != nil {
		return s, err
	}
	if !seqRe.MatchString(sq) {
		return s, fmt.Errorf("%w: seq %q is not a decimal number without leading zeros", ErrTXT, clip(sq))
	}
	if s.Seq, err = strconv.ParseUint(sq, 10, 64); err != nil || s.Seq > record.MaxSeq {
		return s, fmt.Errorf("%w: seq %s is larger than %d", ErrTXT, sq, uint64(record.MaxSeq))
	}
	if caps, ok := seen["caps"]; ok && caps != "" {
		list := strings.Split(caps, ",")
		if len(list) > record.MaxAgentCapabilities {
			return s, fmt.Errorf("%w: caps has %d entries, more than %d", ErrTXT, len(list), record.MaxAgentCapabilities)
		}
		for i, c := range list {
			if !record.ValidIdent(c) {
				return s, fmt.Errorf("%w: caps[%d] %q is not a capability id", ErrTXT, i, clip(c))
			}
		}
		s.Capabilities = list
	}
	return s, nil
}

// clip shortens untrusted text for an error message (quoted with %q).
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
