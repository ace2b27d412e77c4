package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/internal/localkms"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestKeysRotateToAWSKMS: with STRATA_KEK_AWS_KMS_KEY naming a key of a
// KMS (a local-kms, reached through the AWS SDK's usual variables), the
// keyring wraps new data keys there, `strata keys rotate` re-wraps the
// database KEK's keys there, and `keys status` counts them under it.
func TestKeysRotateToAWSKMS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := localkms.Start(t)
	t.Setenv("AWS_REGION", localkms.Region)
	t.Setenv("AWS_ENDPOINT_URL_KMS", s.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", localkms.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", localkms.SecretKey)
	keyID, keyARN := s.NewKey(ctx, t)
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir()}
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, args, testEnv(vars), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, errOut := cli("migrate", "up"); code != exitOK {
		t.Fatalf("migrate up: %s", errOut)
	}
	if code, _, errOut := cli("tenants", "provision", "acme"); code != exitOK { // a rotation walks the directory's tenants
		t.Fatalf("tenants provision: %s", errOut)
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	withKey := func(subject string) {
		t.Helper()
		kr, err := keyring(ctx, exampleEnv(testEnv(vars)), pool)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kr.SubjectKey(ctx, "acme", subject); err != nil {
			t.Fatal(err)
		}
	}
	withKey("alice") // under the database's KEK
	vars["STRATA_KEK_AWS_KMS_KEY"] = keyID
	withKey("bob") // under KMS's
	kmsID := "aws-kms:" + keyARN
	code, out, errOut := cli("keys", "rotate", "--grace", "1ns", "--json")
	if code != exitOK || !strings.Contains(out, kmsID) {
		t.Fatalf("keys rotate: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli("keys", "status", "--json")
	var status struct {
		Databases []struct {
			Current string         `json:"current_kek"`
			Keys    map[string]int `json:"data_keys_by_kek"`
		} `json:"databases"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &status) != nil || len(status.Databases) != 1 {
		t.Fatalf("keys status: %d\n%s%s", code, out, errOut)
	}
	if d := status.Databases[0]; d.Current != kmsID || len(d.Keys) != 1 || d.Keys[kmsID] != 2 {
		t.Fatalf("keys status after the rotation to KMS: %+v, want both data keys under %s", d, kmsID)
	}
	vars["STRATA_KEK_FILE"] = "/nonexistent"
	if code, _, errOut := cli("keys", "status"); code == exitOK || !strings.Contains(errOut, "both name a key-encryption key") {
		t.Fatalf("both KEK settings: %d %s", code, errOut)
	}
}
