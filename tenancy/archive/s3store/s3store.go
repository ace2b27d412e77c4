// Package s3store is the archive's object store on an S3-compatible
// server (AWS S3, SeaweedFS's S3 gateway, MinIO…), through minio-go: a
// well-kept client that speaks SigV4, multipart uploads and the servers'
// differences, which a hand-written one would have to relearn.
package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/strata-es/strata/tenancy/archive"
)

// Config says which bucket of which server.
type Config struct {
	// Endpoint is the server's URL, e.g. https://s3.eu-west-1.amazonaws.com
	// or http://127.0.0.1:8333 (the scheme says whether TLS is used).
	Endpoint string
	Bucket   string
	// Region may be empty for servers that ignore it.
	Region string
	// AccessKey and SecretKey are the credentials; both empty: anonymous.
	AccessKey, SecretKey string
	// CreateBucket makes the bucket when it does not exist (tests, a
	// first run); otherwise a missing bucket is an error.
	CreateBucket bool
}

// Store is an archive.ObjectStore on one bucket.
type Store struct {
	client *minio.Client
	bucket string
	name   string
}

// New connects to cfg's server and checks that the bucket is there (or
// creates it with CreateBucket).
func New(ctx context.Context, cfg Config) (*Store, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("archive store: the endpoint %q is not an http:// or https:// URL", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("archive store: no bucket")
	}
	if (cfg.AccessKey == "") != (cfg.SecretKey == "") {
		return nil, errors.New("archive store: give both the access key and the secret key, or neither")
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		creds = credentials.New(&credentials.Static{})
	}
	client, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: u.Scheme == "https", Region: cfg.Region})
	if err != nil {
		return nil, fmt.Errorf("archive store: %w", err)
	}
	s := &Store{client: client, bucket: cfg.Bucket, name: "s3://" + cfg.Bucket + "@" + u.Host}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("archive store %s: %w", s.name, err)
	}
	if !ok {
		if !cfg.CreateBucket {
			return nil, fmt.Errorf("archive store %s: the bucket does not exist", s.name)
		}
		if err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			return nil, fmt.Errorf("archive store %s: create the bucket: %w", s.name, err)
		}
	}
	return s, nil
}

// Name is "s3://<bucket>@<host>".
func (s *Store) Name() string { return s.name }

// Put uploads the object (multipart when it is big).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	_, err := s.client.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{ContentType: "application/gzip"})
	if err != nil {
		return fmt.Errorf("put %s into %s: %w", key, s.name, err)
	}
	return nil
}

// Get opens the object for reading; archive.ErrNoObject when it is not
// there.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("%w: %s in %s", archive.ErrNoObject, key, s.name)
		}
		return nil, fmt.Errorf("stat %s in %s: %w", key, s.name, err)
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s from %s: %w", key, s.name, err)
	}
	return obj, nil
}

// Delete removes the object (none there: no error, as S3 answers).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete %s from %s: %w", key, s.name, err)
	}
	return nil
}

// List returns the keys under prefix.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list %s in %s: %w", prefix, s.name, obj.Err)
		}
		if strings.HasPrefix(obj.Key, prefix) {
			keys = append(keys, obj.Key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}
