package projections

import "time"

// pacer is how a runner (or a group) following the head spaces its reads:
// the poll interval when nothing happens; after a wake-up whose read found
// nothing visible (an older transaction still open somewhere in the
// cluster), a re-read after MinRepoll, doubling towards the poll interval.
type pacer struct {
	chasing bool          // the last read was prompted by a wake-up
	repoll  time.Duration // current delay of re-reading after an empty wake-up
}

// next returns how long to wait after a step that read n events, unless
// the runner is catching up (then it reads again at once: 0).
func (p *pacer) next(n int, catchingUp bool, cfg *RunnerConfig) time.Duration {
	if catchingUp {
		p.chasing, p.repoll = false, 0
		return 0
	}
	if n == 0 && p.chasing {
		p.repoll = max(2*p.repoll, cfg.MinRepoll)
		if p.repoll < cfg.PollInterval {
			return p.repoll
		}
	}
	p.chasing, p.repoll = false, 0
	return cfg.PollInterval
}

// woken notes a wake-up: the next read chases the events it announced.
func (p *pacer) woken() { p.chasing, p.repoll = true, 0 }

// timedOut notes that the wait ran out, and reports whether the runner was
// idle (a plain poll, not a re-read): time to probe its session.
func (p *pacer) timedOut() (idle bool) {
	p.chasing = p.repoll > 0
	return !p.chasing
}
