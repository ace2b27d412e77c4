package portability

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// manifestMax bounds manifest.json (it lists one line per read-model
// table: kilobytes).
const manifestMax = 4 << 20

// archiveReader reads an archive in order: the manifest, then each file,
// each checked against the manifest's count and SHA-256 once read. It
// refuses what an exporter never writes before reading it: an entry that
// is not a regular file (a symlink or hardlink would otherwise read as an
// empty file), a name that is not a plain relative path of the format, a
// manifest with fields the format does not have, an entry bigger than
// what the unpacked limit leaves (issue 29, finding 14).
type archiveReader struct {
	zr       *gzip.Reader
	tr       *tar.Reader
	unpacked *limitReader
	manifest Manifest
	seen     map[string]bool
	lim      ImportLimits
}

// limitReader counts the unpacked bytes and fails once they pass max.
type limitReader struct {
	r   io.Reader
	n   int64
	max int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.max {
		return n, fmt.Errorf("%w: the archive unpacks to more than the limit of %d bytes (--max-unpacked)", ErrOverLimit, l.max)
	}
	return n, err
}

func openArchive(r io.Reader, lim ImportLimits) (*archiveReader, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: not gzip (%v)", ErrBadArchive, err)
	}
	lr := &limitReader{r: zr, max: lim.UnpackedBytes}
	a := &archiveReader{zr: zr, tr: tar.NewReader(lr), unpacked: lr, seen: map[string]bool{}, lim: lim}
	hdr, err := a.tr.Next()
	if err != nil {
		return nil, a.fail(fmt.Errorf("%w: the first file must be %s (%v)", ErrBadArchive, ManifestFile, err))
	}
	if hdr.Name != ManifestFile {
		return nil, fmt.Errorf("%w: the first file must be %s, not %q", ErrBadArchive, ManifestFile, hdr.Name)
	}
	if err := regular(hdr); err != nil {
		return nil, err
	}
	if hdr.Size > manifestMax {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrOverLimit, ManifestFile, hdr.Size, manifestMax)
	}
	raw, err := io.ReadAll(io.LimitReader(a.tr, manifestMax))
	if err != nil {
		return nil, a.fail(fmt.Errorf("%w: %s: %v", ErrBadArchive, ManifestFile, err))
	}
	if err := event.StrictUnmarshal(raw, &a.manifest); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadArchive, ManifestFile, err)
	}
	if err := a.checkManifest(); err != nil {
		return nil, err
	}
	return a, nil
}

// fail prefers the unpacked limit's error, which a tar or gzip error may
// hide.
func (a *archiveReader) fail(err error) error {
	if a.unpacked.n > a.unpacked.max {
		return fmt.Errorf("%w: the archive unpacks to more than the limit of %d bytes (--max-unpacked)", ErrOverLimit, a.unpacked.max)
	}
	return err
}

var (
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
	tableName = regexp.MustCompile(`^[A-Za-z0-9_]{1,63}$`)
)

func (a *archiveReader) checkManifest() error {
	m := a.manifest
	if m.Format != Format {
		return fmt.Errorf("%w: format %q, want %q", ErrBadArchive, m.Format, Format)
	}
	if m.FormatVersion != FormatVersion {
		return fmt.Errorf("%w: format version %d; this strata reads version %d", ErrBadArchive, m.FormatVersion, FormatVersion)
	}
	if _, err := domain.ParseTenantID(string(m.Tenant)); err != nil {
		return fmt.Errorf("%w: tenant %q", ErrBadArchive, m.Tenant)
	}
	for _, need := range []string{EventsFile, IdempotencyFile, DeadLettersFile} {
		if _, ok := m.Files[need]; !ok {
			return fmt.Errorf("%w: the manifest lists no %s", ErrBadArchive, need)
		}
	}
	// The export section is only shown (--json prints it): text, no
	// control characters, so that it cannot drive a terminal.
	for what, v := range map[string]string{"source.database": m.Export.Source.Database, "source.placement": m.Export.Source.Placement,
		"head": m.Export.Head, "tenant_status": m.Export.TenantStatus} {
		if !utf8.ValidString(v) || len(v) > 200 || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			return fmt.Errorf("%w: the manifest's export.%s %q: want up to 200 bytes of text", ErrBadArchive, what, v)
		}
	}
	names := make([]string, 0, len(m.Files))
	for name := range m.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := checkName(name); err != nil {
			return fmt.Errorf("%w: the manifest lists %v", ErrBadArchive, err)
		}
		if e := m.Files[name]; e.Count < 0 || !sha256Hex.MatchString(e.SHA256) {
			return fmt.Errorf("%w: the manifest's entry of %s: count %d, sha256 %q", ErrBadArchive, name, e.Count, e.SHA256)
		}
	}
	if n := m.Files[EventsFile].Count; n > a.lim.Events {
		return fmt.Errorf("%w: the archive has %d events, more than the limit of %d (--max-events)", ErrOverLimit, n, a.lim.Events)
	}
	return nil
}

// checkName accepts the names of the format only: the three fixed files
// and readmodels/<table>.jsonl. Anything else is named in the error with
// %q (a name is archive-derived: it may hold a terminal's escape
// sequences), with the first rule it breaks.
func checkName(name string) error {
	why := ""
	switch {
	case name == "":
		why = "is empty"
	case !utf8.ValidString(name):
		why = "is not UTF-8"
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		why = "holds a control character"
	case strings.Contains(name, `\`):
		why = "holds a backslash"
	case strings.HasPrefix(name, "/"):
		why = "is an absolute path"
	case name == ".." || strings.HasPrefix(name, "../") || strings.HasSuffix(name, "/..") || strings.Contains(name, "/../"):
		why = `holds a ".." segment`
	}
	if why == "" {
		switch name {
		case ManifestFile, EventsFile, IdempotencyFile, DeadLettersFile:
			return nil
		}
		if t, ok := strings.CutPrefix(name, ReadModelsDir); ok {
			if t, ok = strings.CutSuffix(t, ".jsonl"); ok && tableName.MatchString(t) {
				return nil
			}
		}
		why = "is no file of the format (" + EventsFile + ", " + IdempotencyFile + ", " + DeadLettersFile + ", " + ReadModelsDir + "<table>.jsonl)"
	}
	return fmt.Errorf("entry %q: the name %s", name, why)
}

// regular refuses a tar entry that is not a regular file.
func regular(hdr *tar.Header) error {
	kind := ""
	switch hdr.Typeflag {
	case tar.TypeReg, '\x00': // '\x00': the old (pre-POSIX) regular file
		return nil
	case tar.TypeSymlink:
		kind = "a symbolic link to " + fmt.Sprintf("%q", hdr.Linkname)
	case tar.TypeLink:
		kind = "a hard link to " + fmt.Sprintf("%q", hdr.Linkname)
	case tar.TypeDir:
		kind = "a directory"
	default:
		kind = fmt.Sprintf("of tar type %q", hdr.Typeflag)
	}
	return fmt.Errorf("%w: entry %q is %s, not a regular file", ErrBadArchive, hdr.Name, kind)
}

// archiveFile is one file being read.
type archiveFile struct {
	name  string
	lines *lineReader
	h     hash.Hash
	want  FileEntry
}

// next returns the next file, or io.EOF after the last.
func (a *archiveReader) next() (*archiveFile, error) {
	hdr, err := a.tr.Next()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	if err != nil {
		return nil, a.fail(fmt.Errorf("%w: %v", ErrBadArchive, err))
	}
	if err := checkName(hdr.Name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
	}
	if err := regular(hdr); err != nil {
		return nil, err
	}
	want, ok := a.manifest.Files[hdr.Name]
	if !ok || a.seen[hdr.Name] {
		return nil, fmt.Errorf("%w: entry %q is not in the manifest (or twice in the archive)", ErrBadArchive, hdr.Name)
	}
	if left := a.unpacked.max - a.unpacked.n; hdr.Size > left {
		return nil, fmt.Errorf("%w: %s is %d bytes: the archive unpacks to more than the limit of %d bytes (--max-unpacked)", ErrOverLimit, hdr.Name, hdr.Size, a.unpacked.max)
	}
	a.seen[hdr.Name] = true
	h := sha256.New()
	return &archiveFile{name: hdr.Name, lines: newLineReader(io.TeeReader(a.tr, h), hdr.Name, a.lim.LineBytes), h: h, want: want}, nil
}

// check compares a file read to its end with the manifest.
func (f *archiveFile) check() error {
	if got := hex.EncodeToString(f.h.Sum(nil)); got != f.want.SHA256 || f.lines.n != f.want.Count {
		return fmt.Errorf("%w: %s has %d lines and SHA-256 %s; the manifest says %d and %s", ErrBadArchive, f.name, f.lines.n, got, f.want.Count, f.want.SHA256)
	}
	return nil
}

// missing reports files of the manifest the archive did not contain.
func (a *archiveReader) missing() error {
	var out []string
	for name := range a.manifest.Files {
		if !a.seen[name] {
			out = append(out, name)
		}
	}
	if len(out) > 0 {
		sort.Strings(out)
		return fmt.Errorf("%w: missing %s", ErrBadArchive, strings.Join(out, ", "))
	}
	return nil
}
