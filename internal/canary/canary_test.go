package canary_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/canary"
	"github.com/strata-es/strata/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The scan finds the marker in every kind of column, inside gzip'd bytes
// (also a stream cut short, as an export's first chunk is), and nowhere
// else.
func TestScanFindsTheMarkerWhereverItIs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const marker = "canary-7f3a9c"
	noise := make([]byte, 200<<10) // incompressible: the marker sits past the first pieces
	_, _ = rand.Read(noise)
	long := gz(t, append(append(noise, []byte("..."+marker+"...")...), noise...))
	for _, s := range []string{
		`CREATE SCHEMA probe`,
		`CREATE TABLE probe.texts (k int, v text, tags text[])`,
		`CREATE TABLE probe.docs (k int, doc jsonb, raw json)`,
		`CREATE TABLE probe.blobs (k int, data bytea)`,
		`CREATE TABLE probe.clean (k int, v text, data bytea)`,
		`INSERT INTO probe.texts VALUES (1, 'a ` + marker + ` b', NULL), (2, 'nothing', ARRAY['x', '` + marker + `'])`,
		`INSERT INTO probe.docs VALUES (1, '{"a": {"b": "` + marker + `"}}', NULL), (2, NULL, '["` + marker + `"]')`,
		`INSERT INTO probe.clean VALUES (1, 'canary-7f3a9', 'canary-7f3a9')`,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	for _, b := range [][]byte{[]byte("raw " + marker), gz(t, []byte(marker)), long[:len(long)*3/4], gz(t, []byte("nothing"))} {
		if _, err := conn.Exec(ctx, `INSERT INTO probe.blobs VALUES (1, $1)`, b); err != nil {
			t.Fatal(err)
		}
	}
	finds, err := canary.Scan(ctx, conn, "probe", marker)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(finds))
	for i, f := range finds {
		got[i] = f.String()
	}
	// The short gzip'd marker is a stored block: its bytes hold it raw too.
	want := []string{"blobs.data: 2 rows", "blobs.data (inside gzip'd bytes): 2 rows", "docs.doc: 1 rows", "docs.raw: 1 rows",
		"texts.v: 1 rows", "texts.tags: 1 rows"}
	if !slices.Equal(got, want) {
		t.Fatalf("finds:\n %q\nwant\n %q", got, want)
	}
}
