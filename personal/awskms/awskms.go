// Package awskms holds personal data's key-encryption key in AWS KMS (or a
// service that speaks its API): the data keys are wrapped and unwrapped by
// KMS's Encrypt and Decrypt, and the key-encryption key itself never leaves
// the service. It implements personal.KEK; strata uses it when
// STRATA_KEK_AWS_KMS_KEY names a key (docs/personal-data.md, "The keys").
//
// The wrapped key's binding to its tenant and key ID (the associated data a
// local KEK authenticates) is KMS's encryption context: a wrapped key copied
// to another row does not decrypt, and CloudTrail logs the context of every
// unwrap.
package awskms

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/strata-es/strata/personal"
)

// contextKey is the encryption context's one key; its value is the
// associated data, base64.
const contextKey = "strata-key-binding"

// Timeout bounds each call to KMS (the personal.KEK calls take no context).
const Timeout = 10 * time.Second

// KEK is a key-encryption key held by KMS.
type KEK struct {
	client *kms.Client
	arn    string
}

var _ personal.KEK = (*KEK)(nil)

// New returns the KEK of key (an ID, ARN or alias) through client, after
// checking that KMS knows it as an enabled symmetric key for encryption.
// Its ID is "aws-kms:" and the key's ARN: an alias that moves to another
// key makes another KEK, whose data keys the old one still unwraps until a
// rotation (`strata keys rotate`) re-wraps them.
func New(ctx context.Context, client *kms.Client, key string) (*KEK, error) {
	if key == "" {
		return nil, errors.New("aws kms: no key named")
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	out, err := client.DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String(key)})
	if err != nil {
		return nil, fmt.Errorf("aws kms: describe key %s: %w", key, err)
	}
	md := out.KeyMetadata
	switch {
	case md == nil || md.Arn == nil:
		return nil, fmt.Errorf("aws kms: key %s: no metadata", key)
	case md.KeyState != types.KeyStateEnabled:
		return nil, fmt.Errorf("aws kms: key %s is %s, not Enabled", key, md.KeyState)
	case md.KeyUsage != types.KeyUsageTypeEncryptDecrypt || md.KeySpec != types.KeySpecSymmetricDefault:
		return nil, fmt.Errorf("aws kms: key %s is %s %s; want a SYMMETRIC_DEFAULT key for ENCRYPT_DECRYPT", key, md.KeySpec, md.KeyUsage)
	}
	return &KEK{client: client, arn: *md.Arn}, nil
}

// ID implements personal.KEK.
func (k *KEK) ID() string { return "aws-kms:" + k.arn }

func binding(ad []byte) map[string]string {
	return map[string]string{contextKey: base64.StdEncoding.EncodeToString(ad)}
}

// Wrap implements personal.KEK: KMS Encrypt of the data key, ad as the
// encryption context.
func (k *KEK) Wrap(dek, ad []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	out, err := k.client.Encrypt(ctx, &kms.EncryptInput{KeyId: aws.String(k.arn), Plaintext: dek, EncryptionContext: binding(ad)})
	if err != nil {
		return nil, fmt.Errorf("aws kms: wrap a data key: %w", err)
	}
	return out.CiphertextBlob, nil
}

// Unwrap implements personal.KEK: KMS Decrypt under the same key and
// encryption context.
func (k *KEK) Unwrap(wrapped, ad []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	out, err := k.client.Decrypt(ctx, &kms.DecryptInput{KeyId: aws.String(k.arn), CiphertextBlob: wrapped, EncryptionContext: binding(ad)})
	if err != nil {
		return nil, fmt.Errorf("aws kms: unwrap a data key: %w", err)
	}
	return out.Plaintext, nil
}
