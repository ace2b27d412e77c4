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
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	a.writeEntries(tw, nil)
	if err := tw.Close(); err != nil {
		panic(err)
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// Bomb builds a gzip bomb: the archive as Bytes builds it with one more
// entry at its end, name, whose body is size zero bytes, listed in the
// manifest (0 lines, the SHA-256 of nothing). The archive stays a few
// megabytes per gigabyte of body however large size is, and is built
// without compressing the body: it is one gzip member of 64 MiB of zeros
// (compressed once) repeated, which a gzip reader concatenates (RFC 1952
// allows many members; Go's gzip.Reader reads them as one stream by
// default). A correct importer refuses it at the entry's header, having
// unpacked a few kilobytes.
func (a Archive) Bomb(name string, size int64) []byte {
	const chunk = 64 << 20
	var buf bytes.Buffer
	head := gzip.NewWriter(&buf)
	tw := tar.NewWriter(head)
	a.writeEntries(tw, &File{Name: name, Count: Count(0), SHA256: emptySHA256})
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		panic(err)
	}
	// The header is written; the body, its padding and the end of the
	// archive are gzip members of their own (tw is not closed: it would
	// want the body).
	if err := head.Close(); err != nil {
		panic(err)
	}
	zeros := func(n int64) []byte {
		var m bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&m, gzip.BestCompression)
		if _, err := zw.Write(make([]byte, n)); err != nil {
			panic(err)
		}
		if err := zw.Close(); err != nil {
			panic(err)
		}
		return m.Bytes()
	}
	full := zeros(chunk)
	for left := size; left > 0; left -= chunk {
		if left >= chunk {
			buf.Write(full)
		} else {
			buf.Write(zeros(left))
		}
	}
	// The body's padding to a 512-byte block, then the end of the archive
	// (two zero blocks).
	buf.Write(zeros((512-size%512)%512 + 1024))
	return buf.Bytes()
}

// emptySHA256 is the SHA-256 of no bytes.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// writeEntries writes manifest.json and the files; extra, when set, is
// listed in the manifest too (with its Count and SHA256) but not written.
func (a Archive) writeEntries(tw *tar.Writer, extra *File) {
	raw := a.Manifest
	if raw == nil {
		files := map[string]any{}
		listed := a.Files
		if extra != nil {
			listed = append(append([]File(nil), a.Files...), *extra)
		}
		for _, f := range listed {
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
}

// Count returns a pointer to n, for File.Count.
func Count(n int64) *int64 { return &n }
