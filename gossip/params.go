package gossip

import (
	"fmt"
	"math"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
)

// The checks below mirror go-libp2p-pubsub v0.17.0's own parameter
// validation (gossipsub.go, score_params.go), which is unexported and runs
// only inside NewGossipSub, after pubsub has already started a goroutine
// it does not stop when an option fails. Checking here first gives errors
// that name the field and leaves nothing running. pubsub still validates;
// its error is returned by New if these checks miss something.

func badNumber(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

// validateRouter checks GossipSubParams.
func validateRouter(p *pubsub.GossipSubParams) error {
	e := func(format string, args ...any) error {
		return fmt.Errorf("gossip: Params."+format, args...)
	}
	switch {
	case p.HistoryLength < 1 || p.HistoryGossip < 0 || p.HistoryGossip > p.HistoryLength:
		return e("HistoryGossip=%d must be between 0 and HistoryLength=%d (>= 1)", p.HistoryGossip, p.HistoryLength)
	case p.Dscore > p.Dhi:
		return e("Dscore=%d must be <= Dhi=%d", p.Dscore, p.Dhi)
	case p.HeartbeatInterval <= 0:
		return e("HeartbeatInterval must be positive")
	case p.HeartbeatInitialDelay < 0:
		return e("HeartbeatInitialDelay must not be negative")
	case p.FanoutTTL <= 0 || p.PruneBackoff <= 0 || p.UnsubscribeBackoff <= 0 || p.ConnectionTimeout <= 0:
		return e("FanoutTTL, PruneBackoff, UnsubscribeBackoff and ConnectionTimeout must be positive")
	case p.Connectors < 1 || p.MaxPendingConnections < 1:
		return e("Connectors and MaxPendingConnections must be at least 1")
	case p.D < 0 || p.Dlo < 0 || p.Dhi < 0 || p.Dout < 0 || p.Dlazy < 0 || p.Dscore < 0:
		return e("degrees must not be negative")
	case p.D == 0 && p.Dlo == 0 && p.Dhi == 0 && p.Dout == 0:
		return nil // bootstrapper: no mesh
	case p.Dlo > p.D || p.D > p.Dhi:
		return e("D=%d must be between Dlo=%d and Dhi=%d", p.D, p.Dlo, p.Dhi)
	case p.Dout >= p.Dlo || p.Dout >= p.D/2:
		return e("Dout=%d must be less than Dlo=%d and than D/2=%d", p.Dout, p.Dlo, p.D/2)
	}
	return nil
}

// validateThresholds checks PeerScoreThresholds. With SkipAtomicValidation
// a group of fields left at zero is not checked, as in pubsub.
func validateThresholds(t *pubsub.PeerScoreThresholds) error {
	all := !t.SkipAtomicValidation
	if all || t.PublishThreshold != 0 || t.GossipThreshold != 0 || t.GraylistThreshold != 0 {
		switch {
		case badNumber(t.GossipThreshold) || t.GossipThreshold > 0:
			return fmt.Errorf("gossip: Thresholds.GossipThreshold must be <= 0")
		case badNumber(t.PublishThreshold) || t.PublishThreshold > 0 || t.PublishThreshold > t.GossipThreshold:
			return fmt.Errorf("gossip: Thresholds.PublishThreshold must be <= GossipThreshold and <= 0")
		case badNumber(t.GraylistThreshold) || t.GraylistThreshold > 0 || t.GraylistThreshold > t.PublishThreshold:
			return fmt.Errorf("gossip: Thresholds.GraylistThreshold must be <= PublishThreshold and <= 0")
		}
	}
	if (all || t.AcceptPXThreshold != 0) && (badNumber(t.AcceptPXThreshold) || t.AcceptPXThreshold < 0) {
		return fmt.Errorf("gossip: Thresholds.AcceptPXThreshold must be >= 0")
	}
	if (all || t.OpportunisticGraftThreshold != 0) && (badNumber(t.OpportunisticGraftThreshold) || t.OpportunisticGraftThreshold < 0) {
		return fmt.Errorf("gossip: Thresholds.OpportunisticGraftThreshold must be >= 0")
	}
	return nil
}

func decayOK(d float64) bool { return d > 0 && d < 1 && !badNumber(d) }

// validateScore checks PeerScoreParams and every topic's parameters.
func validateScore(s *pubsub.PeerScoreParams) error {
	for topic, tp := range s.Topics {
		if tp == nil {
			return fmt.Errorf("gossip: Score.Topics[%s] is nil", topic)
		}
		if err := validateTopicScore(tp); err != nil {
			return fmt.Errorf("gossip: Score.Topics[%s].%w", topic, err)
		}
	}
	e := func(format string, args ...any) error { return fmt.Errorf("gossip: Score."+format, args...) }
	all := !s.SkipAtomicValidation
	if (all || s.TopicScoreCap != 0) && (badNumber(s.TopicScoreCap) || s.TopicScoreCap < 0) {
		return e("TopicScoreCap must be >= 0")
	}
	if badNumber(s.AppSpecificWeight) {
		return e("AppSpecificWeight must be a number")
	}
	if all || s.IPColocationFactorWeight != 0 {
		switch {
		case badNumber(s.IPColocationFactorWeight) || s.IPColocationFactorWeight > 0:
			return e("IPColocationFactorWeight must be <= 0")
		case s.IPColocationFactorWeight != 0 && s.IPColocationFactorThreshold < 1:
			return e("IPColocationFactorThreshold must be at least 1")
		}
	}
	if all || s.BehaviourPenaltyWeight != 0 || s.BehaviourPenaltyThreshold != 0 {
		switch {
		case badNumber(s.BehaviourPenaltyWeight) || s.BehaviourPenaltyWeight > 0:
			return e("BehaviourPenaltyWeight must be <= 0")
		case s.BehaviourPenaltyWeight != 0 && !decayOK(s.BehaviourPenaltyDecay):
			return e("BehaviourPenaltyDecay must be between 0 and 1")
		case badNumber(s.BehaviourPenaltyThreshold) || s.BehaviourPenaltyThreshold < 0:
			return e("BehaviourPenaltyThreshold must be >= 0")
		}
	}
	if all || s.DecayInterval != 0 || s.DecayToZero != 0 {
		switch {
		case s.DecayInterval < time.Second:
			return e("DecayInterval must be at least 1s")
		case !decayOK(s.DecayToZero):
			return e("DecayToZero must be between 0 and 1")
		}
	}
	return nil
}

// validateTopicScore checks one topic's parameters; the error starts with
// the field name. With SkipAtomicValidation a parameter group (P1, P2,
// P3, P3b, P4) left entirely at zero is not checked, as in pubsub.
func validateTopicScore(p *pubsub.TopicScoreParams) error {
	all := !p.SkipAtomicValidation
	if badNumber(p.TopicWeight) || p.TopicWeight < 0 {
		return fmt.Errorf("TopicWeight must be >= 0")
	}
	if all || p.TimeInMeshWeight != 0 || p.TimeInMeshQuantum != 0 || p.TimeInMeshCap != 0 {
		switch {
		case p.TimeInMeshQuantum <= 0:
			return fmt.Errorf("TimeInMeshQuantum must be positive")
		case badNumber(p.TimeInMeshWeight) || p.TimeInMeshWeight < 0:
			return fmt.Errorf("TimeInMeshWeight must be >= 0")
		case p.TimeInMeshWeight != 0 && (badNumber(p.TimeInMeshCap) || p.TimeInMeshCap <= 0):
			return fmt.Errorf("TimeInMeshCap must be positive")
		}
	}
	if all || p.FirstMessageDeliveriesWeight != 0 || p.FirstMessageDeliveriesDecay != 0 || p.FirstMessageDeliveriesCap != 0 {
		switch {
		case badNumber(p.FirstMessageDeliveriesWeight) || p.FirstMessageDeliveriesWeight < 0:
			return fmt.Errorf("FirstMessageDeliveriesWeight must be >= 0")
		case p.FirstMessageDeliveriesWeight != 0 && !decayOK(p.FirstMessageDeliveriesDecay):
			return fmt.Errorf("FirstMessageDeliveriesDecay must be between 0 and 1")
		case p.FirstMessageDeliveriesWeight != 0 && (badNumber(p.FirstMessageDeliveriesCap) || p.FirstMessageDeliveriesCap <= 0):
			return fmt.Errorf("FirstMessageDeliveriesCap must be positive")
		}
	}
	if all || p.MeshMessageDeliveriesWeight != 0 || p.MeshMessageDeliveriesCap != 0 || p.MeshMessageDeliveriesDecay != 0 ||
		p.MeshMessageDeliveriesThreshold != 0 || p.MeshMessageDeliveriesWindow != 0 || p.MeshMessageDeliveriesActivation != 0 {
		switch {
		case badNumber(p.MeshMessageDeliveriesWeight) || p.MeshMessageDeliveriesWeight > 0:
			return fmt.Errorf("MeshMessageDeliveriesWeight must be <= 0")
		case p.MeshMessageDeliveriesWeight != 0 && !decayOK(p.MeshMessageDeliveriesDecay):
			return fmt.Errorf("MeshMessageDeliveriesDecay must be between 0 and 1")
		case p.MeshMessageDeliveriesWeight != 0 && (badNumber(p.MeshMessageDeliveriesCap) || p.MeshMessageDeliveriesCap <= 0):
			return fmt.Errorf("MeshMessageDeliveriesCap must be positive")
		case p.MeshMessageDeliveriesWeight != 0 && (badNumber(p.MeshMessageDeliveriesThreshold) || p.MeshMessageDeliveriesThreshold <= 0):
			return fmt.Errorf("MeshMessageDeliveriesThreshold must be positive")
		case p.MeshMessageDeliveriesWindow < 0:
			return fmt.Errorf("MeshMessageDeliveriesWindow must not be negative")
		case p.MeshMessageDeliveriesWeight != 0 && p.MeshMessageDeliveriesActivation < time.Second:
			return fmt.Errorf("MeshMessageDeliveriesActivation must be at least 1s")
		}
	}
	if all || p.MeshFailurePenaltyWeight != 0 || p.MeshFailurePenaltyDecay != 0 {
		switch {
		case badNumber(p.MeshFailurePenaltyWeight) || p.MeshFailurePenaltyWeight > 0:
			return fmt.Errorf("MeshFailurePenaltyWeight must be <= 0")
		case p.MeshFailurePenaltyWeight != 0 && !decayOK(p.MeshFailurePenaltyDecay):
			return fmt.Errorf("MeshFailurePenaltyDecay must be between 0 and 1")
		}
	}
	if all || p.InvalidMessageDeliveriesWeight != 0 || p.InvalidMessageDeliveriesDecay != 0 {
		switch {
		case badNumber(p.InvalidMessageDeliveriesWeight) || p.InvalidMessageDeliveriesWeight > 0:
			return fmt.Errorf("InvalidMessageDeliveriesWeight must be <= 0")
		case !decayOK(p.InvalidMessageDeliveriesDecay):
			return fmt.Errorf("InvalidMessageDeliveriesDecay must be between 0 and 1")
		}
	}
	return nil
}

// MinMeshDegree and MaxMeshDegree bound MeshParams' degree: below 2 the
// router's own rule (Dout < Dlo) cannot hold; a mesh of more peers than
// 32 is a flood, which GossipSub exists to avoid.
const (
	MinMeshDegree = 2
	MaxMeshDegree = 32
)

// MeshParams returns pubsub's default router parameters with the mesh
// degree D set to d and the degrees that follow it derived as GossipSub's
// defaults derive them from 6: Dlo = d-1, Dhi = 2d, Dscore = min(4, 2d/3)
// and Dout = min(2, (d-1)/2), kept below d/2 as the router requires. d = 6
// gives pubsub's defaults. It is for exploring the mesh degree (simnet's
// --mesh-degree); agentd runs with the defaults.
func MeshParams(d int) (*pubsub.GossipSubParams, error) {
	if d < MinMeshDegree || d > MaxMeshDegree {
		return nil, fmt.Errorf("gossip: mesh degree %d must be between %d and %d", d, MinMeshDegree, MaxMeshDegree)
	}
	p := pubsub.DefaultGossipSubParams()
	p.D, p.Dlo, p.Dhi = d, d-1, 2*d
	p.Dscore = min(4, 2*d/3)
	p.Dout = max(0, min(2, (d-1)/2, d/2-1))
	if err := validateRouter(&p); err != nil {
		return nil, err
	}
	return &p, nil
}
