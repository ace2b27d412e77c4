package portability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/strata-es/strata/domain/event"
)

// An import reads the archive twice through walk: a first pass that only
// checks (so that everything is checked before anything is written,
// ARCHITECTURE decision 18), and a second that loads what the first
// checked, checking it again on the way (the same code, so that the load
// cannot see a line the check did not). Between the two, nothing in
// memory grows with the archive but its event IDs (plan.ids).

// plan is what the first pass learned.
type plan struct {
	manifest Manifest
	// digest identifies the archive's content (its manifest's Content,
	// which holds every file's SHA-256): a rerun with the same archive
	// continues an import, another archive does not.
	digest string
	// ids are the archive's event IDs in ordinal order; sorted is the
	// same, sorted (to find a metadata reference to an archive event).
	ids, sorted []uuid.UUID
	idempotency int64
	deadLetters int64
}

func (p *plan) events() int64 { return int64(len(p.ids)) }

// has reports whether id is an event of the archive.
func (p *plan) has(id uuid.UUID) bool {
	_, ok := slices.BinarySearchFunc(p.sorted, id, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ok
}

// walker is what a pass does with each checked event and record; done
// ends the pass early (the load, once the files it writes are read).
type walker interface {
	event(ev *checkedEvent) error
	idempotency(l *IdempotencyLine) error
	fileDone(name string) error
	done() bool
}

// checkedEvent is one line of events.jsonl that passed every check.
type checkedEvent struct {
	line EventLine
	id   uuid.UUID
	meta event.Metadata
}

// checker holds the state of the checks that span lines.
type checker struct {
	s        *Service
	lim      ImportLimits
	versions map[string]int64 // stream -> last version seen
	lastKey  string
	keys     int64
}

// walk reads the archive from r, checking every file against the
// manifest and every line against the format, and hands each event and
// idempotency record to w.
func (s *Service) walk(ctx context.Context, r io.Reader, lim ImportLimits, w walker) (Manifest, error) {
	a, err := openArchive(r, lim)
	if err != nil {
		return Manifest{}, err
	}
	c := &checker{s: s, lim: lim, versions: map[string]int64{}}
	for !w.done() {
		f, err := a.next()
		if errors.Is(err, io.EOF) {
			return a.manifest, a.missing()
		}
		if err != nil {
			return a.manifest, err
		}
		for {
			raw, err := f.lines.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return a.manifest, a.fail(err)
			}
			n := f.lines.n
			if n%1000 == 0 {
				if err := ctx.Err(); err != nil {
					return a.manifest, err
				}
			}
			switch {
			case f.name == EventsFile:
				ev, err := c.event(n, raw)
				if err == nil {
					err = w.event(ev)
				}
				if err != nil {
					return a.manifest, err
				}
			case f.name == IdempotencyFile:
				l, err := c.idempotency(n, raw)
				if err == nil {
					err = w.idempotency(l)
				}
				if err != nil {
					return a.manifest, err
				}
			default: // dead letters and read models: compared, not loaded
				if t := bytes.TrimLeft(raw, " \t"); len(t) == 0 || t[0] != '{' || !json.Valid(raw) {
					return a.manifest, fmt.Errorf("%w: %s line %d is not one JSON object", ErrBadArchive, f.name, n)
				}
			}
		}
		if err := f.check(); err != nil {
			return a.manifest, err
		}
		if err := w.fileDone(f.name); err != nil {
			return a.manifest, err
		}
	}
	return a.manifest, nil
}

// event checks line n of events.jsonl: the format (no unknown field, one
// value), its place in the log and its stream, its ID, its size, and its
// payload through the module's codec (strict) and the module's own rules
// (event.Validator).
func (c *checker) event(n int64, raw []byte) (*checkedEvent, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s line %d: %s", ErrBadArchive, EventsFile, n, fmt.Sprintf(format, args...))
	}
	ev := &checkedEvent{}
	l := &ev.line
	if err := event.StrictUnmarshal(raw, l); err != nil {
		return nil, bad("%v", err)
	}
	if l.Ordinal != n {
		return nil, bad("ordinal %d: events must be in log order", l.Ordinal)
	}
	if n > c.lim.Events {
		return nil, fmt.Errorf("%w: the archive has more than the limit of %d events (--max-events)", ErrOverLimit, c.lim.Events)
	}
	if size := len(l.Data) + len(l.Metadata); size > c.lim.EventBytes {
		return nil, fmt.Errorf("%w: %s line %d: the event is %d bytes, larger than the limit of %d bytes (--max-event)", ErrOverLimit, EventsFile, n, size, c.lim.EventBytes)
	}
	if len(l.Stream) == 0 || len(l.Stream) > 200 || !utf8.ValidString(l.Stream) || strings.IndexFunc(l.Stream, unicode.IsControl) >= 0 {
		return nil, bad("stream %q: want 1 to 200 bytes of text", l.Stream)
	}
	if prev := c.versions[l.Stream]; l.Version != prev+1 {
		return nil, bad("stream %q has version %d after %d: a stream's versions run 1, 2, 3 … without a gap", l.Stream, l.Version, prev)
	}
	c.versions[l.Stream] = l.Version
	id, err := uuid.Parse(l.EventID)
	if err != nil || id.String() != strings.ToLower(l.EventID) {
		return nil, bad("event_id %q is not a UUID", l.EventID)
	}
	ev.id = id
	if l.RecordedAt.IsZero() {
		return nil, bad("recorded_at is missing")
	}
	if !c.s.cfg.Registry.Has(l.Type) {
		return nil, bad("event type %q has no codec here (a module this installation does not run?)", l.Type)
	}
	if hasNUL(l.Data) || hasNUL(l.Metadata) {
		return nil, bad("a string holds U+0000, which PostgreSQL's jsonb cannot store")
	}
	if event.Sealed(l.Data) {
		return nil, bad("%v", event.ErrForgedSeal)
	}
	p, err := c.s.cfg.Registry.DecodeStrict(l.Type, l.SchemaVersion, l.Data)
	if err != nil {
		return nil, bad("%v", err)
	}
	if v, ok := p.(event.Validator); ok {
		if err := v.Validate(l.Stream); err != nil {
			return nil, bad("%s in stream %q: %v", l.Type, l.Stream, err)
		}
	}
	if t := bytes.TrimSpace(l.Metadata); len(t) == 0 || t[0] != '{' {
		return nil, bad("metadata is not a JSON object")
	}
	if err := event.StrictUnmarshal(l.Metadata, &ev.meta); err != nil {
		return nil, bad("metadata: %v", err)
	}
	return ev, nil
}

// idempotency checks line n of idempotency.jsonl. Keys come in byte order,
// as the export writes them: that they only grow proves them unique
// without remembering them.
func (c *checker) idempotency(n int64, raw []byte) (*IdempotencyLine, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s line %d: %s", ErrBadArchive, IdempotencyFile, n, fmt.Sprintf(format, args...))
	}
	l := &IdempotencyLine{}
	if err := event.StrictUnmarshal(raw, l); err != nil {
		return nil, bad("%v", err)
	}
	if len(l.Key) == 0 || len(l.Key) > 255 || !utf8.ValidString(l.Key) || strings.ContainsRune(l.Key, 0) {
		return nil, bad("key %q: want 1 to 255 bytes of text", l.Key)
	}
	if c.keys > 0 && l.Key <= c.lastKey {
		return nil, bad("key %q after %q: keys must be unique, in byte order", l.Key, c.lastKey)
	}
	if !utf8.ValidString(l.RequestHash) || strings.ContainsRune(l.RequestHash, 0) {
		return nil, bad("request_hash is not text")
	}
	if l.CreatedAt.IsZero() {
		return nil, bad("created_at is missing")
	}
	c.lastKey, c.keys = l.Key, c.keys+1
	return l, nil
}

// hasNUL reports whether JSON text holds the escape \u0000 (a backslash
// before it escapes the backslash, not the u).
func hasNUL(raw []byte) bool {
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		j += i
		k := j
		for k > 0 && raw[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return true
		}
		i = j + 1
	}
}

// checkPass is the first pass: it only remembers the IDs.
type checkPass struct {
	p        *plan
	progress func(Progress)
}

func (c *checkPass) event(ev *checkedEvent) error {
	c.p.ids = append(c.p.ids, ev.id)
	if n := int64(len(c.p.ids)); n%10000 == 0 {
		c.progress(Progress{Phase: "check", File: EventsFile, Rows: n})
	}
	return nil
}
func (c *checkPass) idempotency(*IdempotencyLine) error { c.p.idempotency++; return nil }
func (c *checkPass) fileDone(string) error              { return nil }
func (c *checkPass) done() bool                         { return false }

// check runs the first pass and returns the plan: the archive holds what
// the manifest says, every line is valid, and no event ID is there twice.
func (s *Service) check(ctx context.Context, r io.Reader, lim ImportLimits) (*plan, error) {
	p := &plan{}
	m, err := s.walk(ctx, r, lim, &checkPass{p: p, progress: s.progress})
	if err != nil {
		return nil, err
	}
	p.manifest = m
	p.deadLetters = m.Files[DeadLettersFile].Count
	p.sorted = slices.Clone(p.ids)
	slices.SortFunc(p.sorted, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	for i := 1; i < len(p.sorted); i++ {
		if p.sorted[i] == p.sorted[i-1] {
			return nil, fmt.Errorf("%w: %s: event_id %s is there more than once", ErrBadArchive, EventsFile, p.sorted[i])
		}
	}
	p.digest = contentDigest(m)
	return p, nil
}

// Check reads an archive as an import's first pass does — every file
// against the manifest's count and SHA-256, every line against the format,
// every event through its module's codec and rules — and writes nothing.
// It returns the manifest; ErrBadArchive (wrapped) when anything differs.
// An archive to object storage is checked so after it is read back.
func (s *Service) Check(ctx context.Context, r io.Reader, lim ImportLimits) (Manifest, error) {
	if s.cfg.Registry == nil {
		return Manifest{}, errors.New("portability: checking an archive needs the modules' event registry (Config.Registry)")
	}
	lim = lim.withDefaults()
	if err := lim.Validate(); err != nil {
		return Manifest{}, err
	}
	p, err := s.check(ctx, r, lim)
	if err != nil {
		return Manifest{}, err
	}
	return p.manifest, nil
}
