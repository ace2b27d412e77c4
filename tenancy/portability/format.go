package portability

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/strata-es/strata/domain"
)

// The archive format (docs/tenants.md, "Export and import"). A change that
// an older importer would misread takes a new FormatVersion.
const (
	Format        = "strata-tenant-archive"
	FormatVersion = 1

	ManifestFile    = "manifest.json"
	EventsFile      = "events.jsonl"
	IdempotencyFile = "idempotency.jsonl"
	DeadLettersFile = "dead_letters.jsonl"
	ReadModelsDir   = "readmodels/"
)

// FileEntry is one file of the archive in the manifest.
type FileEntry struct {
	Count  int64  `json:"count"`  // lines (rows)
	SHA256 string `json:"sha256"` // of the file's bytes, hex
}

// Manifest is manifest.json. Format, FormatVersion, Tenant and Files are
// the archive's content: two exports of the same data have equal Content.
// Export is about this export (when, from where) and differs every time.
type Manifest struct {
	Format        string               `json:"format"`
	FormatVersion int                  `json:"format_version"`
	Tenant        domain.TenantID      `json:"tenant"`
	Files         map[string]FileEntry `json:"files"`
	Export        ExportInfo           `json:"export"`
}

// ExportInfo is the volatile section of the manifest.
type ExportInfo struct {
	CreatedAt time.Time `json:"created_at"`
	// Source names the database the archive was read from and the
	// tenant's placement there.
	Source Source `json:"source"`
	// Head is the source log's position of the tenant's last event
	// ("<tx_id>/<position>"; "" when it has none). Positions belong to the
	// source database: events.jsonl carries ordinals instead.
	Head string `json:"head"`
	// Quiescent: no event of the tenant was appended while the archive was
	// read, so its read models and idempotency records match events.jsonl
	// exactly. False means the tenant was written to during the export
	// (suspend it first for an exact archive).
	Quiescent bool `json:"quiescent"`
	// TenantStatus is the tenant's directory status at the export.
	TenantStatus string `json:"tenant_status"`
}

// Source is where an archive comes from.
type Source struct {
	Database  string `json:"database"`
	Placement string `json:"placement"`
}

// Content is the compared part of the manifest as canonical JSON: equal
// for two exports of the same data, whatever their time and source.
func (m Manifest) Content() []byte {
	c := m
	c.Export = ExportInfo{}
	raw, _ := json.Marshal(struct {
		Format        string               `json:"format"`
		FormatVersion int                  `json:"format_version"`
		Tenant        domain.TenantID      `json:"tenant"`
		Files         map[string]FileEntry `json:"files"`
	}{c.Format, c.FormatVersion, c.Tenant, c.Files})
	return raw
}

// Tables returns the read-model tables of the archive, by name.
func (m Manifest) Tables() []string {
	var out []string
	for name := range m.Files {
		if t, ok := strings.CutPrefix(name, ReadModelsDir); ok {
			out = append(out, strings.TrimSuffix(t, ".jsonl"))
		}
	}
	sort.Strings(out)
	return out
}

// jsonlWriter writes one JSON value per line into a file of the staging
// directory, counting lines and hashing bytes.
type jsonlWriter struct {
	f     *os.File
	h     hash.Hash
	w     io.Writer
	count int64
	buf   bytes.Buffer
	enc   *json.Encoder
}

func newJSONL(dir, name string) (*jsonlWriter, error) {
	path := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	j := &jsonlWriter{f: f, h: sha256.New()}
	j.w = io.MultiWriter(f, j.h)
	j.enc = json.NewEncoder(&j.buf)
	j.enc.SetEscapeHTML(false)
	return j, nil
}

// write encodes v (json.Encoder ends it with the newline).
func (j *jsonlWriter) write(v any) error {
	j.buf.Reset()
	if err := j.enc.Encode(v); err != nil {
		return err
	}
	j.count++
	_, err := j.w.Write(j.buf.Bytes())
	return err
}

func (j *jsonlWriter) close() (FileEntry, error) {
	err := j.f.Close()
	return FileEntry{Count: j.count, SHA256: hex.EncodeToString(j.h.Sum(nil))}, err
}

// writeArchive writes the gzip'd tar: manifest.json first (so that a
// reader can verify every file as it streams), then the files by name.
// Headers carry no time, owner or mode of the machine: the archive's bytes
// depend on its content and the manifest only.
func writeArchive(w io.Writer, dir string, m Manifest) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	raw = append(raw, '\n')
	add := func(name string, size int64, body io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: time.Unix(0, 0).UTC(), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := io.Copy(tw, body)
		return err
	}
	if err := add(ManifestFile, int64(len(raw)), bytes.NewReader(raw)); err != nil {
		return err
	}
	names := make([]string, 0, len(m.Files))
	for name := range m.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err == nil {
			err = add(name, st.Size(), f)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("archive %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// ErrBadArchive: the archive is not one this version reads, or its files
// do not match its manifest.
var ErrBadArchive = fmt.Errorf("%w: not a valid tenant archive", domain.ErrInvalid)

// errStop ends a walk early.
var errStop = errors.New("stop")
