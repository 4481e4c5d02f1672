package skillcenter

import (
	"sync"
	"time"
)

// Circuit breaker states.
const (
	circuitClosed   = "closed"
	circuitOpen     = "open"
	circuitHalfOpen = "half-open"
)

type outcome int

const (
	outcomeSuccess outcome = iota // the server answered (2xx, 3xx, 4xx but 429)
	outcomeFailure                // transport error, timeout, 5xx, 429
	outcomeNeutral                // the caller gave up (its context ended)
)

// breaker is a consecutive-failure circuit breaker: after threshold failed
// attempts in a row it opens and refuses calls for cooldown; then one probe
// is let through (half-open): its success closes the circuit, its failure
// opens it again.
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu       sync.Mutex
	state    string
	failures int
	openedAt time.Time
	probing  bool
}

func newBreaker(threshold int, cooldown time.Duration) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, state: circuitClosed}
}

// allow reports whether an attempt may start now.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case circuitClosed:
		return true
	case circuitOpen:
		if now.Sub(b.openedAt) < b.cooldown {
			return false
		}
		b.state = circuitHalfOpen
	}
	if b.probing {
		return false
	}
	b.probing = true
	return true
}

// done records the outcome of an attempt allow let through. It reports
// whether the attempt opened the circuit.
func (b *breaker) done(now time.Time, o outcome) (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasProbe := b.state == circuitHalfOpen && b.probing
	if wasProbe {
		b.probing = false
	}
	switch o {
	case outcomeSuccess:
		b.failures = 0
		b.state = circuitClosed
	case outcomeFailure:
		b.failures++
		if b.state != circuitOpen && (wasProbe || b.failures >= b.threshold) {
			b.state = circuitOpen
			b.openedAt = now
			return true
		}
	}
	return false
}

// snapshot returns the state and the consecutive failures.
func (b *breaker) snapshot() (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.failures
}
