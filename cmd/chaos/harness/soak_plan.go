package harness

import (
	"fmt"
	"time"
)

// minSoak is the shortest soak R18 accepts: three faults (one of each
// kind) at least 15 s apart.
const minSoak = time.Minute

// soakPlan is everything R18 derives from the soak's length: the nightly
// soak (30m) gets the numbers of notes/reliability.md R18 (a fault every 2
// minutes, RSS growth per 10 minutes), a short one the same shape scaled
// down. docs/chaos.md R18 explains each choice.
type soakPlan struct {
	Duration time.Duration
	// Faults at Every, 2*Every, ... (Faults of them) after the open
	// loop starts, cycling R1, R2, R5; the last is followed by a quiet
	// Every before the load ends.
	Every  time.Duration
	Faults int
	// Hold is how long an R5 fault keeps its transaction open.
	Hold time.Duration
	// Settle is the recovery allowed after a fault's action has ended
	// (the killed process ready, PostgreSQL accepting connections, the
	// transaction committed): the fault window runs to its end plus
	// Settle, and only samples outside windows are judged.
	Settle time.Duration
	// Warmup: an incarnation's RSS is judged from this long after its
	// start: a third of the soak, at least one fault interval, at most 3
	// minutes (a process restarted by an R1 fault warms up at the soak's
	// rate, more slowly than the first ones, which had the burst).
	Warmup time.Duration
	// GrowthUnit is the time unit of the RSS criterion: 10 minutes for a
	// soak of 30 minutes or more, a third of a shorter soak.
	GrowthUnit time.Duration
	// Sample is the sampling interval; Burst the closed-loop measurement.
	Sample time.Duration
	Burst  time.Duration
}

func clampDuration(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// planSoak derives the plan from the configuration.
func planSoak(c R18Config) soakPlan {
	d := c.Duration
	p := soakPlan{Duration: d}
	// A fault every SOAK/15 (2 minutes at 30m), but at least 30 s apart,
	// so that an outage and its recovery end before the next fault; and
	// at least three faults, one of each kind.
	p.Every = max(d/15, 30*time.Second)
	p.Faults = int(d/p.Every) - 1
	if p.Faults < 3 {
		p.Faults, p.Every = 3, d/4
	}
	p.Hold = min(30*time.Second, p.Every/4)
	p.Settle = min(10*time.Second, p.Every/3)
	p.Warmup = min(max(d/3, p.Every), 3*time.Minute)
	p.GrowthUnit = min(10*time.Minute, d/3)
	p.Sample = clampDuration(d/600, time.Second, 5*time.Second)
	p.Burst = c.Burst
	if p.Burst == 0 {
		p.Burst = clampDuration(d/120, 8*time.Second, 15*time.Second)
	}
	return p
}

// faultKinds are the faults of the soak, in turn.
var faultKinds = []string{R1, R2, R5}

func (p soakPlan) kind(i int) string { return faultKinds[i%len(faultKinds)] }

func (p soakPlan) String() string {
	return fmt.Sprintf("%s at the rate, %d faults (R1, R2, R5 in turn) every %s, R5 holds %s, %s to settle after each; sampling every %s; RSS judged %s after each start, growth per %s",
		p.Duration, p.Faults, p.Every, p.Hold, p.Settle, p.Sample, p.Warmup, p.GrowthUnit)
}
