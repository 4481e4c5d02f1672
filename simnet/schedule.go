package simnet

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// EventKind names a scheduled event.
type EventKind string

// The events of a schedule.
const (
	EventChurn     EventKind = "churn"     // Leave+Crash nodes go, Restart+Fresh nodes come
	EventPartition EventKind = "partition" // the network splits in two halves
	EventHeal      EventKind = "heal"      // the halves are linked again
	EventMassJoin  EventKind = "massjoin"  // Fresh nodes join at once
	EventQuery     EventKind = "query"     // one discover query
	EventSybil     EventKind = "sybil"     // the hostile peer joins and floods
)

// Event is one scheduled action, at an offset from the start of the
// measured run.
type Event struct {
	At   time.Duration `json:"at_ns"`
	Kind EventKind     `json:"kind"`
	// Churn and mass join: how many nodes leave gracefully, crash, restart
	// (a departed node with its identity and store; fresh when none is
	// available) and join fresh.
	Leave   int `json:"leave,omitempty"`
	Crash   int `json:"crash,omitempty"`
	Restart int `json:"restart,omitempty"`
	Fresh   int `json:"fresh,omitempty"`
	// Query is the query of a query event.
	Query *Query `json:"query,omitempty"`
	// Rand seeds the choices made when the event runs (which nodes leave,
	// which node queries, the partition's sides): they depend on the live
	// set at that moment, which is itself a function of the seed.
	Rand uint64 `json:"rand"`
}

// Schedule is the time-ordered list of events of a run.
type Schedule struct {
	Events []Event `json:"events"`
}

// Count returns the number of events of kind k.
func (s *Schedule) Count(k EventKind) int {
	n := 0
	for _, e := range s.Events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// Plan returns the scenario with its defaults, the catalog and the schedule
// of its seed. It does not start anything; the same seed always gives the
// same plan.
func (s Scenario) Plan() (Scenario, *Catalog, *Schedule, error) {
	s, err := s.withDefaults()
	if err != nil {
		return s, nil, nil, err
	}
	cat := NewCatalog(s.Seed, s.Skills, s.Capabilities, s.Zipf)
	return s, cat, newSchedule(s, cat), nil
}

// newSchedule draws the events of a scenario with defaults applied.
func newSchedule(s Scenario, cat *Catalog) *Schedule {
	r := newRand(s.Seed, streamSchedule, 0)
	var ev []Event
	add := func(e Event) {
		e.Rand = r.Uint64()
		ev = append(ev, e)
	}
	switch s.Kind {
	case KindChurn:
		k := int(math.Round(s.ChurnFraction * float64(s.Nodes)))
		if k > 0 {
			crash := int(math.Round(float64(k) * s.CrashShare))
			restart := int(math.Round(float64(k) * s.RestartShare))
			for at := s.ChurnInterval; at < s.Duration; at += s.ChurnInterval {
				add(Event{At: at, Kind: EventChurn, Leave: k - crash, Crash: crash, Restart: restart, Fresh: k - restart})
			}
		}
	case KindPartition:
		add(Event{At: s.PartitionAt, Kind: EventPartition})
		if heal := s.PartitionAt + s.PartitionFor; heal < s.Duration {
			add(Event{At: heal, Kind: EventHeal})
		}
	case KindMassJoin:
		add(Event{At: s.MassJoinAt, Kind: EventMassJoin, Fresh: s.MassJoin})
	case KindSybil:
		add(Event{At: s.SybilAt, Kind: EventSybil})
	}
	if s.QueryRate > 0 {
		capZipf := newZipf(r, s.Zipf, len(cat.Offered))
		skillZipf := newZipf(r, s.Zipf, len(cat.Skills))
		at := time.Duration(0)
		for {
			at += time.Duration(r.ExpFloat64() / s.QueryRate * float64(time.Second))
			if at >= s.Duration {
				break
			}
			q := cat.drawQuery(r, capZipf, skillZipf)
			add(Event{At: at, Kind: EventQuery, Query: &q})
		}
	}
	// Network events run before queries scheduled at the same instant.
	slices.SortStableFunc(ev, func(a, b Event) int {
		if c := cmp.Compare(a.At, b.At); c != 0 {
			return c
		}
		return cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind))
	})
	return &Schedule{Events: ev}
}

func kindOrder(k EventKind) int {
	if k == EventQuery {
		return 1
	}
	return 0
}
