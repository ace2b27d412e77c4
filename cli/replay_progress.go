package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/strata-es/strata/replay"
)

// progressBar draws a rebuild's progress: a bar redrawn in place when w is
// a terminal, a plain line every few seconds otherwise.
type progressBar struct {
	w        io.Writer
	terminal bool
	last     time.Time
	phase    replay.Phase
	drawn    bool
}

func newProgressBar(w io.Writer) *progressBar {
	b := &progressBar{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			b.terminal = true
		}
	}
	return b
}

func (b *progressBar) update(p replay.Progress) {
	phaseChanged := p.Phase != b.phase
	b.phase = p.Phase
	if p.Phase == replay.PhaseDone {
		return
	}
	label := string(p.Phase)
	if p.Projection != "" && p.Phase != replay.PhaseBuild {
		label += " " + p.Projection
	}
	pct := 0.0
	if p.Total > 0 {
		pct = min(100*float64(p.Done)/float64(p.Total), 100)
	}
	eta := "-"
	if p.ETA > 0 {
		eta = p.ETA.Round(time.Second).String()
	}
	unit := "events"
	if p.Phase == replay.PhaseStreams {
		unit = "streams"
	}
	if b.terminal {
		const width = 30
		filled := int(pct / 100 * width)
		if phaseChanged && b.drawn {
			fmt.Fprintln(b.w)
		}
		fmt.Fprintf(b.w, "\r%-28s [%s%s] %5.1f%%  %d/%d %s  %.0f/s  ETA %s   ", label, strings.Repeat("#", filled), strings.Repeat(".", width-filled),
			pct, p.Done, p.Total, unit, p.Rate, eta)
		b.drawn = true
		return
	}
	if !phaseChanged && time.Since(b.last) < 2*time.Second {
		return
	}
	b.last = time.Now()
	fmt.Fprintf(b.w, "rebuild: %s: %d/%d %s (%.0f%%), %.0f %s/s, eta %s\n", label, p.Done, p.Total, unit, pct, p.Rate, unit, eta)
}

func (b *progressBar) end() {
	if b.terminal && b.drawn {
		fmt.Fprintln(b.w)
	}
}

// ----- dlq -----
