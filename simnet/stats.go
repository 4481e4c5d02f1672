package simnet

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Percentiles summarises a distribution of durations, in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// samples collects durations for percentiles. Beyond its capacity it keeps
// a uniform reservoir sample (Count, Mean and Max stay exact).
type samples struct {
	mu  sync.Mutex
	v   []float64 // milliseconds
	cap int
	n   int64
	sum float64
	max float64
	r   *rand.Rand
}

func newSamples(capacity int) *samples {
	return &samples{cap: capacity, r: rand.New(rand.NewPCG(uint64(capacity), 0x5eed))}
}

func (s *samples) add(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.sum += ms
	s.max = max(s.max, ms)
	if len(s.v) < s.cap {
		s.v = append(s.v, ms)
		return
	}
	if j := s.r.Int64N(s.n); j < int64(s.cap) {
		s.v[j] = ms
	}
}

func (s *samples) summary() Percentiles {
	s.mu.Lock()
	v := slices.Clone(s.v)
	p := Percentiles{Count: s.n, Max: s.max}
	if s.n > 0 {
		p.Mean = s.sum / float64(s.n)
	}
	s.mu.Unlock()
	slices.Sort(v)
	p.P50, p.P95, p.P99 = rank(v, 0.50), rank(v, 0.95), rank(v, 0.99)
	return p
}

// rank is the nearest-rank percentile of sorted v (0 when empty).
func rank(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// count returns how many durations were added.
func (s *samples) count() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
