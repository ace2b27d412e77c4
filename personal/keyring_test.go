package personal_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/personal"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type fixture struct {
	d     *testdb.DB
	owner *pgxpool.Pool
}

func newFixture(t testing.TB) fixture {
	t.Helper()
	d := testdb.New(t)
	// The owner connection, as DATABASE_URL is: the superuser, in strata's
	// schema.
	cfg, err := pgxpool.ParseConfig(d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	owner, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	return fixture{d: d, owner: owner}
}

// keyring is a process's keyring on the app role, as serve makes it.
func (f fixture) keyring() *personal.Keyring {
	return personal.NewKeyring(f.d.App, personal.DatabaseKEKs(context.Background(), f.d.App, nil), personal.Config{})
}

func (f fixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.owner.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func binding(tenant, stream string) event.Binding {
	return event.Binding{Tenant: tenant, Stream: stream, Type: "order.created", Field: "customer_id"}
}

func TestKeyringSealsPerSubjectAndShreds(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	k := f.keyring()

	// One key per subject and tenant, however many processes ask at once.
	const racers = 8
	ids := make([]string, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if ids[i], err = f.keyring().SubjectKey(ctx, "t-a", "alice"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id != ids[0] {
			t.Fatalf("concurrent first uses made different keys: %v", ids)
		}
	}
	alice := ids[0]
	bob, err := k.SubjectKey(ctx, "t-a", "bob")
	if err != nil || bob == alice {
		t.Fatalf("bob's key %q (%v), alice's %q", bob, err, alice)
	}
	otherTenant, err := k.SubjectKey(ctx, "t-b", "alice")
	if err != nil || otherTenant == alice {
		t.Fatalf("alice of another tenant has key %q (%v)", otherTenant, err)
	}
	if n := f.count(t, `SELECT count(*) FROM subject_keys`); n != 3 {
		t.Fatalf("subject_keys holds %d rows, want 3", n)
	}
	// Nothing in the table names a subject.
	if n := f.count(t, `SELECT count(*) FROM subject_keys WHERE subject_hash IN ('alice', 'bob') OR position('alice'::bytea in wrapped) > 0`); n != 0 {
		t.Fatal("subject_keys names a subject")
	}

	env, err := k.Seal(ctx, alice, binding("t-a", "order-1"), []byte(`"alice"`))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(env.Box, []byte("alice")) {
		t.Fatal("the ciphertext holds the plaintext")
	}
	// Another process opens it; nowhere else does it open.
	if got, err := f.keyring().Open(ctx, env, binding("t-a", "order-1")); err != nil || string(got) != `"alice"` {
		t.Fatalf("open: %s %v", got, err)
	}
	for _, b := range []event.Binding{binding("t-a", "order-2"), {Tenant: "t-a", Stream: "order-1", Type: "order.created", Field: "note"}} {
		if _, err := f.keyring().Open(ctx, env, b); err == nil || errors.Is(err, event.ErrShredded) {
			t.Fatalf("opened (or called shredded) at %+v: %v", b, err)
		}
	}
	// Tenant t-b's session cannot read t-a's key: row-level security.
	if _, err := f.keyring().Open(ctx, event.Envelope{KeyID: alice, Box: env.Box}, event.Binding{Tenant: "t-b", Stream: "order-1", Type: "order.created", Field: "customer_id"}); !errors.Is(err, event.ErrShredded) {
		t.Fatalf("t-b reading t-a's key: %v, want it not found (shredded)", err)
	}

	// Destroy alice's key: her fields are shredded for every process,
	// bob's open as before.
	bobEnv, err := k.Seal(ctx, bob, binding("t-a", "order-2"), []byte(`"bob"`))
	if err != nil {
		t.Fatal(err)
	}
	id, err := personal.Destroy(ctx, f.owner, "t-a", "alice")
	if err != nil || id != alice {
		t.Fatalf("destroy: %q %v", id, err)
	}
	k.Forget("t-a", "alice", alice)
	for _, kr := range []*personal.Keyring{k, f.keyring()} {
		if _, err := kr.Open(ctx, env, binding("t-a", "order-1")); !errors.Is(err, event.ErrShredded) {
			t.Fatalf("open after destroy: %v, want ErrShredded", err)
		}
		if got, err := kr.Open(ctx, bobEnv, binding("t-a", "order-2")); err != nil || string(got) != `"bob"` {
			t.Fatalf("bob after alice's erasure: %s %v", got, err)
		}
	}
	// A returning alice is a new subject with a new key.
	again, err := k.SubjectKey(ctx, "t-a", "alice")
	if err != nil || again == alice {
		t.Fatalf("alice after her erasure: key %q (%v), the destroyed one was %q", again, err, alice)
	}
}

// TestRotationRewrapsEveryKeyWithoutTouchingAnEvent: a rotation to a new
// database KEK, then to a key file, re-wraps every data key; what the old
// keys sealed still opens; the sealed bytes are not rewritten.
func TestRotationRewrapsEveryKeyWithoutTouchingAnEvent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	k := f.keyring()
	type sealed struct {
		tenant string
		env    event.Envelope
	}
	var all []sealed
	for _, tenant := range []string{"t-a", "t-b"} {
		for _, subject := range []string{"alice", "bob", "carol"} {
			id, err := k.SubjectKey(ctx, tenant, subject)
			if err != nil {
				t.Fatal(err)
			}
			env, err := k.Seal(ctx, id, binding(tenant, "order-"+subject), []byte(`"`+subject+`"`))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, sealed{tenant, env})
		}
	}
	tenants := []string{"t-a", "t-b"}
	before, err := personal.KeyCounts(ctx, f.owner, tenants)
	if err != nil || len(before) != 1 {
		t.Fatalf("keys by KEK before: %v %v", before, err)
	}

	// To a new database KEK.
	res, err := personal.Rotate(ctx, f.owner, nil, tenants, personal.RotateOptions{})
	if err != nil || res.Keys != 6 || res.Tenants != 2 || len(res.Retired) != 0 {
		t.Fatalf("rotate: %+v %v", res, err)
	}
	after, err := personal.KeyCounts(ctx, f.owner, tenants)
	if err != nil || len(after) != 1 || after[res.To] != 6 {
		t.Fatalf("keys by KEK after: %v (to %s) %v", after, res.To, err)
	}
	// The old KEK stays for the grace (a process may still wrap with it).
	if n := f.count(t, `SELECT count(*) FROM key_encryption_keys`); n != 2 {
		t.Fatalf("%d database KEKs right after the rotation, want the old and the new", n)
	}
	for _, s := range all {
		if _, err := f.keyring().Open(ctx, s.env, binding(s.tenant, "order-elsewhere")); err == nil {
			t.Fatal("opened with a wrong binding")
		}
	}
	check := func(kek personal.KEK) {
		t.Helper()
		kr := personal.NewKeyring(f.d.App, personal.DatabaseKEKs(ctx, f.d.App, kek), personal.Config{})
		i := 0
		for _, tenant := range tenants {
			for _, subject := range []string{"alice", "bob", "carol"} {
				got, err := kr.Open(ctx, all[i].env, binding(tenant, "order-"+subject))
				if err != nil || string(got) != `"`+subject+`"` {
					t.Fatalf("%s/%s after the rotation: %s %v", tenant, subject, got, err)
				}
				i++
			}
		}
	}
	check(nil)

	// To a key file.
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := personal.FileKEK(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err = personal.Rotate(ctx, f.owner, file, tenants, personal.RotateOptions{Grace: time.Nanosecond})
	if err != nil || res.Keys != 6 || res.To != file.ID() || len(res.Retired) != 2 {
		t.Fatalf("rotate to the file: %+v %v", res, err)
	}
	check(file)
	// The database's KEKs are retired once nothing they wrapped is left.
	if n := f.count(t, `SELECT count(*) FROM key_encryption_keys`); n != 0 {
		t.Fatalf("%d database KEKs left after the rotation to a file", n)
	}
	check(file)
	// Without the file, the keys do not open.
	if _, err := personal.NewKeyring(f.d.App, personal.DatabaseKEKs(ctx, f.d.App, nil), personal.Config{}).Open(ctx, all[0].env, binding("t-a", "order-alice")); err == nil {
		t.Fatal("a key wrapped by the file's KEK opened without it")
	}
}
