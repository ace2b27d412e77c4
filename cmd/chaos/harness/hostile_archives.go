package harness

import (
	"archive/tar"
	"fmt"
	"strings"

	"github.com/strata-es/strata/tenancy/portability/archivetest"
)

// hostileArchive is one archive HOSTILE imports that must be refused with
// nothing written: what an exporter never writes but an attacker (or a
// careless operator with a corrupted or foreign file) hands to
// `strata tenants import`. Every one holds the run's hostile marker in an
// otherwise valid event, so that anything of it that reached the database
// is found by a scan of every table.
type hostileArchive struct {
	name   string // the attack, for the table and the notes
	tenant string // imported under this tenant ID (none of the run's others)
	raw    []byte
	// want is a part of the refusal the CLI must print (what it names).
	want string
}

// hostileArchives returns the attacks of HOSTILE, each under a tenant ID
// of its own derived from prefix (hs-h-<attack>), with marker in their
// data. The limits are the CLI's defaults (docs/tenants.md, "Import"):
// 256 KiB an event, 1 MiB a line, 4 GiB unpacked.
func hostileArchives(prefix, marker string) []hostileArchive {
	line := func(ord int, stream string, version int, typ, data, meta string) string {
		return fmt.Sprintf(`{"ordinal":%d,"stream":%q,"version":%d,"event_id":"00000000-0000-4000-8000-%012d","type":%q,"schema_version":1,"data":%s,"metadata":%s,"recorded_at":"2026-01-01T00:00:00Z"}`,
			ord, stream, version, ord, typ, data, meta)
	}
	created := func(ord int, id, meta string) string {
		return line(ord, "order-"+id, 1, "order.created",
			fmt.Sprintf(`{"order_id":%q,"customer_id":"%s-c1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`, id, marker), meta)
	}
	ok := created(1, "h-1", `{}`)
	arch := func(files ...archivetest.File) archivetest.Archive {
		return archivetest.Archive{Tenant: "hs-elsewhere", Files: files}
	}
	minimal := func(lines ...string) archivetest.Archive { return arch(archivetest.Minimal(lines...)...) }
	out := []hostileArchive{
		// 5 GiB of zeros in about 5 MB: over the 4 GiB unpacked limit.
		{name: "gzip bomb (5 GiB of zeros in one entry)", want: "--max-unpacked",
			raw: minimal(ok).Bomb("readmodels/order_list.jsonl", 5<<30)},
		{name: "oversized event (300 KiB)", want: "--max-event",
			raw: minimal(created(1, "h-1", `{"actor":"`+strings.Repeat("x", 300<<10)+`"}`)).Bytes()},
		{name: "line over the line limit (2 MiB)", want: "--max-line",
			raw: minimal(ok, created(2, "h-2", `{"actor":"`+strings.Repeat("y", 2<<20)+`"}`)).Bytes()},
		{name: "symlink entry", want: "not a regular file",
			raw: arch(archivetest.File{Name: "events.jsonl", Type: tar.TypeSymlink, Linkname: "/etc/passwd", Count: archivetest.Count(0),
				SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
				archivetest.Entry("idempotency.jsonl"), archivetest.Entry("dead_letters.jsonl"), archivetest.Entry("readmodels/order_list.jsonl", `{"m":"`+marker+`"}`)).Bytes()},
		{name: "'..' in an entry name", want: `".." segment`,
			raw: arch(append(archivetest.Minimal(ok), archivetest.Entry("readmodels/../../order_list.jsonl", `{}`))...).Bytes()},
		{name: "unknown field in an event", want: `unknown field "position"`,
			raw: minimal(ok, strings.Replace(created(2, "h-2", `{}`), `{"ordinal":2,`, `{"ordinal":2,"position":7,`, 1)).Bytes()},
		{name: "markup in an ID", want: "order id must match",
			raw: minimal(ok, line(2, "order-<b>x</b>", 1, "order.created",
				`{"order_id":"<b>x</b>","customer_id":"`+marker+`-c2","currency":"EUR","at":"2026-01-01T00:00:00Z"}`, `{}`)).Bytes()},
	}
	for i := range out {
		out[i].tenant = fmt.Sprintf("%s-%d", prefix, i+1)
	}
	return out
}
