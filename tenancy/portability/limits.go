package portability

import (
	"errors"
	"fmt"
	"time"

	"github.com/strata-es/strata/domain"
)

// ImportLimits bound what one import may cost (ARCHITECTURE decision 18):
// an archive is input from outside, and a load that nothing bounds holds
// the database's resources for as long as the archive likes. A zero field
// takes its default (DefaultImportLimits); each refusal names its limit
// and the flag of `strata tenants import` that raises it, and writes
// nothing (every limit but Duration is checked in the first pass, before
// anything is written; a run stopped by Duration is resumed by running
// it again).
type ImportLimits struct {
	// ArchiveBytes bounds the archive as given (gzip'd): --max-archive.
	ArchiveBytes int64 `json:"archive_bytes"`
	// UnpackedBytes bounds the tar stream the gzip unpacks to, headers
	// included (a gzip bomb unpacks a few megabytes to gigabytes):
	// --max-unpacked.
	UnpackedBytes int64 `json:"unpacked_bytes"`
	// EventBytes bounds one event, its data and metadata as the archive
	// holds them: --max-event. The default is a quarter of NATS's default
	// max_payload (1 MiB), so that every imported event can be relayed,
	// headers and all.
	EventBytes int `json:"event_bytes"`
	// LineBytes bounds one line of any file of the archive, enforced while
	// reading: memory does not grow with a line: --max-line.
	LineBytes int `json:"line_bytes"`
	// Events bounds the archive's event count: --max-events. An import
	// holds 32 bytes per event in memory (the IDs, for the duplicate check
	// and resumption), so this bounds its memory too.
	Events int64 `json:"events"`
	// Duration bounds the whole import, both passes, from the first byte
	// read to the tenant's activation (not the --wait after it):
	// --timeout.
	Duration time.Duration `json:"duration"`
}

// DefaultImportLimits are the limits of a zero ImportLimits.
var DefaultImportLimits = ImportLimits{
	ArchiveBytes:  1 << 30,
	UnpackedBytes: 4 << 30,
	EventBytes:    256 << 10,
	LineBytes:     1 << 20,
	Events:        1_000_000,
	Duration:      time.Hour,
}

// withDefaults fills the zero fields.
func (l ImportLimits) withDefaults() ImportLimits {
	d := DefaultImportLimits
	if l.ArchiveBytes == 0 {
		l.ArchiveBytes = d.ArchiveBytes
	}
	if l.UnpackedBytes == 0 {
		l.UnpackedBytes = d.UnpackedBytes
	}
	if l.EventBytes == 0 {
		l.EventBytes = d.EventBytes
	}
	if l.LineBytes == 0 {
		l.LineBytes = d.LineBytes
	}
	if l.Events == 0 {
		l.Events = d.Events
	}
	if l.Duration == 0 {
		l.Duration = d.Duration
	}
	return l
}

// Validate refuses negative limits.
func (l ImportLimits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int64
	}{{"archive bytes", l.ArchiveBytes}, {"unpacked bytes", l.UnpackedBytes}, {"event bytes", int64(l.EventBytes)},
		{"line bytes", int64(l.LineBytes)}, {"events", l.Events}, {"duration", int64(l.Duration)}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("import limit %s: %d is negative", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// ErrOverLimit: the archive is over one of the import's limits. It is
// invalid input (the limits are the input's contract), and says which.
var ErrOverLimit = fmt.Errorf("%w: over an import limit", domain.ErrInvalid)

// ErrTimeLimit: the import ran out of its Duration. What it committed
// stays; running the same import again continues after it.
var ErrTimeLimit = errors.New("the import reached its time limit")
