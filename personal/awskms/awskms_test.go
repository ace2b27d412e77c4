package awskms_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/localkms"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/personal"
	"github.com/strata-es/strata/personal/awskms"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newKey starts a local-kms and makes a symmetric key there.
func newKey(ctx context.Context, t *testing.T) (*kms.Client, string) {
	t.Helper()
	s := localkms.Start(t)
	id, _ := s.NewKey(ctx, t)
	return s.Client(), id
}

// TestWrapUnwrapBoundToTheirPlace: a data key wrapped by KMS unwraps under
// the same binding only; a disabled key is refused up front.
func TestWrapUnwrapBoundToTheirPlace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, id := newKey(ctx, t)
	kek, err := awskms.New(ctx, client, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := kek.ID(); got != "aws-kms:arn:aws:kms:"+localkms.Region+":111122223333:key/"+id {
		t.Fatalf("ID %q", got)
	}
	dek := []byte("0123456789abcdef0123456789abcdef")
	wrapped, err := kek.Wrap(dek, []byte("t-a/key-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := kek.Unwrap(wrapped, []byte("t-a/key-1")); err != nil || string(got) != string(dek) {
		t.Fatalf("unwrap: %q %v", got, err)
	}
	if _, err := kek.Unwrap(wrapped, []byte("t-b/key-1")); err == nil {
		t.Fatal("a wrapped key unwrapped under another tenant's binding")
	}
	if _, err := client.DisableKey(ctx, &kms.DisableKeyInput{KeyId: aws.String(id)}); err != nil {
		t.Fatal(err)
	}
	if _, err := awskms.New(ctx, client, id); err == nil {
		t.Fatal("a disabled key was taken as a KEK")
	}
}

// TestRotationToKMS: `strata keys rotate` with a KMS key re-wraps every
// data key the database's KEK wrapped; the keys then open with KMS only,
// and new subjects' keys are wrapped by KMS.
func TestRotationToKMS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, id := newKey(ctx, t)
	kek, err := awskms.New(ctx, client, id)
	if err != nil {
		t.Fatal(err)
	}
	d := testdb.New(t)
	cfg, err := pgxpool.ParseConfig(d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	owner, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	bind := func(subject string) event.Binding {
		return event.Binding{Tenant: "t-a", Stream: "order-" + subject, Type: "order.created", Field: "customer_id"}
	}
	local := personal.NewKeyring(d.App, personal.DatabaseKEKs(ctx, d.App, nil), personal.Config{})
	sealed := map[string]event.Envelope{}
	for _, subject := range []string{"alice", "bob", "carol"} {
		key, err := local.SubjectKey(ctx, "t-a", subject)
		if err != nil {
			t.Fatal(err)
		}
		if sealed[subject], err = local.Seal(ctx, key, bind(subject), []byte(`"`+subject+`"`)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := personal.Rotate(ctx, owner, kek, []string{"t-a"}, personal.RotateOptions{Grace: time.Nanosecond})
	if err != nil || res.Keys != 3 || res.To != kek.ID() {
		t.Fatalf("rotate to KMS: %+v %v", res, err)
	}
	withKMS := personal.NewKeyring(d.App, personal.DatabaseKEKs(ctx, d.App, kek), personal.Config{})
	for subject, env := range sealed {
		if got, err := withKMS.Open(ctx, env, bind(subject)); err != nil || string(got) != `"`+subject+`"` {
			t.Fatalf("%s after the rotation: %s %v", subject, got, err)
		}
	}
	if _, err := personal.NewKeyring(d.App, personal.DatabaseKEKs(ctx, d.App, nil), personal.Config{}).Open(ctx, sealed["alice"], bind("alice")); err == nil {
		t.Fatal("a key wrapped by KMS opened without it")
	}
	if _, err := withKMS.SubjectKey(ctx, "t-a", "dave"); err != nil {
		t.Fatal(err)
	}
	counts, err := personal.KeyCounts(ctx, owner, []string{"t-a"})
	if err != nil || len(counts) != 1 || counts[kek.ID()] != 4 {
		t.Fatalf("keys by KEK: %v %v, want all 4 wrapped by %s", counts, err, kek.ID())
	}
}
