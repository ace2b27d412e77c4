// Package archivetest builds tenant archives byte by byte for tests,
// hostile ones included (a symlink where a file should be, a name with
// "..", a manifest with fields the format does not have, one line of
// 50 MiB): what an exporter never writes, but an importer must refuse.
// It imports only the standard library, so the archive's shape is the
// test's own, not the exporter's.
package archivetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// File is one tar entry.
type File struct {
	Name string
	Body []byte
	// Type is the tar typeflag; 0 is a regular file.
	Type byte
	// Linkname is a symlink's or hardlink's target.
	Linkname string
	// Unlisted leaves the file out of the generated manifest.
	Unlisted bool
	// Count and SHA256, when set, are what the manifest says instead of
	// the body's own.
	Count  *int64
	SHA256 string
}

// Archive is an archive to build.
type Archive struct {
	Tenant string
	Files  []File
	// Manifest, when set, is manifest.json's bytes as they are; otherwise
	// the manifest lists every file not Unlisted, with its line count and
	// SHA-256, plus Extra's keys at its top level.
	Manifest []byte
	Extra    map[string]any
}

// Entry returns a regular file whose body is the lines, each ended by a
// newline.
func Entry(name string, lines ...string) File {
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return File{Name: name, Body: b.Bytes()}
}

// Minimal returns the files every archive must have, events.jsonl holding
// the lines given.
func Minimal(events ...string) []File {
	return []File{Entry("events.jsonl", events...), Entry("idempotency.jsonl"), Entry("dead_letters.jsonl")}
}

// Bytes builds the gzip'd tar: manifest.json first, then the files in the
// order given.
func (a Archive) Bytes() []byte {
	raw := a.Manifest
	if raw == nil {
		files := map[string]any{}
		for _, f := range a.Files {
			if f.Unlisted {
				continue
			}
			sum := sha256.Sum256(f.Body)
			entry := map[string]any{"count": int64(bytes.Count(f.Body, []byte{'\n'})), "sha256": hex.EncodeToString(sum[:])}
			if f.Count != nil {
				entry["count"] = *f.Count
			}
			if f.SHA256 != "" {
				entry["sha256"] = f.SHA256
			}
			files[f.Name] = entry
		}
		m := map[string]any{"format": "strata-tenant-archive", "format_version": 1, "tenant": a.Tenant, "files": files,
			"export": map[string]any{"created_at": "2026-01-01T00:00:00Z", "source": map[string]any{"database": "test", "placement": "pool"}, "head": "", "quiescent": true, "tenant_status": "active"}}
		for k, v := range a.Extra {
			m[k] = v
		}
		var err error
		if raw, err = json.Marshal(m); err != nil {
			panic(err)
		}
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	add := func(f File) {
		hdr := &tar.Header{Name: f.Name, Mode: 0o644, Size: int64(len(f.Body)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if f.Type != 0 && f.Type != tar.TypeReg {
			hdr.Typeflag, hdr.Linkname, hdr.Size = f.Type, f.Linkname, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			panic(fmt.Sprintf("tar header %q: %v", f.Name, err))
		}
		if hdr.Size > 0 {
			if _, err := tw.Write(f.Body); err != nil {
				panic(err)
			}
		}
	}
	add(File{Name: "manifest.json", Body: raw})
	for _, f := range a.Files {
		add(f)
	}
	if err := tw.Close(); err != nil {
		panic(err)
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// Count returns a pointer to n, for File.Count.
func Count(n int64) *int64 { return &n }
