// Package backoff is the one exponential back-off of agentd's retry loops:
// the SkillCenter client's retries, the node's join loop and the DHT's
// provide and put retries; and Sleep, the one wait that a context ends.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay is the wait before retry attempt+1 (attempt counts from 0):
// base·2^attempt, at most limit, then moved by a random amount within
// ±jitter of itself (0 ≤ jitter ≤ 1; 0 is exact). A base ≤ 0 is no wait.
func Delay(base, limit time.Duration, attempt int, jitter float64) time.Duration {
	if base <= 0 {
		return 0
	}
	d := base
	for range attempt {
		if d >= limit/2 {
			d = limit
			break
		}
		d *= 2
	}
	d = min(d, limit)
	if jitter <= 0 || d <= 0 {
		return d
	}
	span := time.Duration(float64(d) * min(jitter, 1))
	return max(d-span+time.Duration(rand.Int64N(int64(2*span)+1)), 0)
}

// Backoff counts consecutive failures of one loop. The zero value with
// Base and Max set is ready; it is not safe for concurrent use.
type Backoff struct {
	Base, Max time.Duration
	// Jitter is Delay's: the fraction by which a wait may move either way.
	Jitter float64
	n      int
}

// Next returns the wait after one more failure.
func (b *Backoff) Next() time.Duration {
	d := Delay(b.Base, b.Max, b.n, b.Jitter)
	if d < b.Max {
		b.n++
	}
	return d
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d, or less when ctx ends first; it reports whether the
// whole wait passed (a d of zero or less passes at once unless ctx has
// ended).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
