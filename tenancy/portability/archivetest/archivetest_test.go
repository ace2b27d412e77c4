package archivetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// TestBomb: a 5 GiB entry costs a few megabytes of archive, and the
// archive is a valid gzip'd tar whose manifest lists the entry: a reader
// sees the manifest, the files and the bomb's header (its size as built),
// its body reads as zeros, and the archive ends after it.
func TestBomb(t *testing.T) {
	const size = 5<<30 + 100 // not a multiple of the chunk nor of a tar block
	a := Archive{Tenant: "acme", Files: Minimal(`{"ordinal":1}`)}
	raw := a.Bomb("readmodels/order_list.jsonl", size)
	if len(raw) > 8<<20 {
		t.Fatalf("a bomb of %d bytes takes %d bytes of archive", int64(size), len(raw))
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	var manifest struct {
		Files map[string]struct {
			Count  int64  `json:"count"`
			SHA256 string `json:"sha256"`
		} `json:"files"`
	}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %q: %v", names, err)
		}
		names = append(names, hdr.Name)
		switch hdr.Name {
		case "manifest.json":
			if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
				t.Fatal(err)
			}
		case "readmodels/order_list.jsonl":
			if hdr.Size != size {
				t.Fatalf("the bomb's header says %d bytes, want %d", hdr.Size, int64(size))
			}
			// Read only the first 128 MiB (two members and part of a third)
			// in a test; the size in the header is what an importer judges.
			head := make([]byte, 1<<20)
			for read := 0; read < 128<<20; read += len(head) {
				if _, err := io.ReadFull(tr, head); err != nil {
					t.Fatalf("the bomb's body after %d bytes: %v", read, err)
				}
				if !bytes.Equal(head, make([]byte, len(head))) {
					t.Fatalf("the bomb's body after %d bytes is not zeros", read)
				}
			}
			names = append(names, "(body read in part)")
			goto done
		}
	}
done:
	want := []string{"manifest.json", "events.jsonl", "idempotency.jsonl", "dead_letters.jsonl", "readmodels/order_list.jsonl", "(body read in part)"}
	if len(names) != len(want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("entries %q, want %q", names, want)
		}
	}
	sum := sha256.Sum256(nil)
	if e, ok := manifest.Files["readmodels/order_list.jsonl"]; !ok || e.Count != 0 || e.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("the manifest lists the bomb as %+v (listed %v)", e, ok)
	}
}

// TestBombEnds: a small bomb reads to its end as a valid archive.
func TestBombEnds(t *testing.T) {
	raw := Archive{Tenant: "acme", Files: Minimal()}.Bomb("readmodels/x.jsonl", 70<<20+3)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, tr)
		if err != nil || n != hdr.Size {
			t.Fatalf("%s: read %d of %d bytes: %v", hdr.Name, n, hdr.Size, err)
		}
		total += n
	}
	if total < 70<<20+3 {
		t.Errorf("read %d bytes in all", total)
	}
}
