package replay

import (
	"sync"
	"time"
)

// tracker turns the batches of a rebuild's runners into Progress reports.
type tracker struct {
	mu    sync.Mutex
	fn    func(Progress)
	every time.Duration
	began time.Time
	last  time.Time
	projs map[string]*projProgress
}

type projProgress struct {
	done, total int64
	phase       Phase
	finished    bool
}

func newTracker(fn func(Progress), every time.Duration) *tracker {
	if every <= 0 {
		every = 250 * time.Millisecond
	}
	return &tracker{fn: fn, every: every, began: time.Now(), projs: map[string]*projProgress{}}
}

func (t *tracker) start(name string, total int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.projs[name] = &projProgress{total: total, phase: PhaseBuild}
	t.report(true, "", "")
}

func (t *tracker) advance(name string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.projs[name]; p != nil {
		p.done += n
	}
	t.report(false, "", "")
}

func (t *tracker) phase(ph Phase, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.projs[name]; p != nil {
		p.phase = ph
	}
	t.report(true, name, ph)
}

func (t *tracker) done(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.projs[name]; p != nil {
		p.finished = true
	}
}

func (t *tracker) drop(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.projs, name)
}

func (t *tracker) finish() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.projs {
		p.phase, p.finished = PhaseDone, true
	}
	t.report(true, "", PhaseDone)
}

// report sends the slowest projection's progress (caller holds mu): in the
// earliest phase any projection is in, or in phase, when one projection
// just entered it.
func (t *tracker) report(force bool, name string, phase Phase) {
	if t.fn == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(t.last) < t.every {
		return
	}
	t.last = now
	pr := Progress{Phase: PhaseDone, Projection: name, Elapsed: now.Sub(t.began), Done: -1}
	order := map[Phase]int{PhaseBuild: 0, PhaseIndexes: 1, PhaseSwap: 2, PhaseStreams: 3, PhaseDone: 4}
	for _, p := range t.projs {
		if order[p.phase] < order[pr.Phase] {
			pr.Phase = p.phase
		}
		if pr.Done < 0 || p.done < pr.Done {
			pr.Done = p.done
		}
		pr.Total = max(pr.Total, p.total)
	}
	pr.Done = max(pr.Done, 0)
	if secs := pr.Elapsed.Seconds(); secs > 0 {
		pr.Rate = float64(pr.Done) / secs
	}
	if pr.Rate > 0 && pr.Total > pr.Done {
		pr.ETA = time.Duration(float64(pr.Total-pr.Done) / pr.Rate * float64(time.Second))
	}
	if phase != "" {
		pr.Phase = phase
	}
	t.fn(pr)
}
