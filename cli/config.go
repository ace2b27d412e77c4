package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/strata-es/strata/module"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgembed"
)

// env reads configuration variables. Every variable strata reads is named
// in envVars (the README's configuration reference is checked against it).
type env struct {
	get  func(string) string
	mods module.Set // the application's modules, as Run was given them
}

func newEnv(get func(string) string, mods module.Set) env { return env{get: get, mods: mods} }

// envVars documents every environment variable strata reads.
var envVars = map[string]string{
	"DATABASE_URL":                     "PostgreSQL URL of the owner connection (migrations, rebuilds' DDL; a login that may become strata_owner); unset = a private PostgreSQL under STRATA_DATA_DIR",
	"STRATA_APP_DATABASE_URL":          "PostgreSQL URL of the login serving commands and queries (a member of strata_app only); unset = strata_app_login, provisioned from DATABASE_URL",
	"STRATA_APP_DATABASE_POOLER":       "what STRATA_APP_DATABASE_URL points at: none (PostgreSQL, default), session (a session-mode pool) or transaction (a transaction-mode pooler such as PgBouncer; docs/pgbouncer.md)",
	"STRATA_QUERY_DATABASE_URL":        "query role: comma-separated PostgreSQL URLs of streaming replicas to read from (logins that are members of strata_app only); a read with a consistency token waits for the replica to replay it or falls back to the primary (docs/scaling.md)",
	"STRATA_QUERY_REPLICA_BUDGET":      "how long a read with a consistency token waits on a replica before it falls back to the primary (default 500ms)",
	"STRATA_QUERY_REPLICA_MAX_LAG":     "a replica further behind than this serves no reads (default 10s)",
	"STRATA_QUERY_REPLICA_REQUIRED":    "true: /readyz fails while no replica is usable (default false: it warns, reads fall back to the primary)",
	"STRATA_PROJECTOR_DATABASE_URL":    "PostgreSQL URL of the login running projections (a member of strata_projector only); unset = strata_projector_login, provisioned from DATABASE_URL",
	"STRATA_ALLOW_PRIVILEGED_LOGIN":    "development only: serve even when a serving login could escalate (superuser, owner, ...); logged as a warning on every start",
	"STRATA_DATA_DIR":                  "directory for the embedded PostgreSQL and the development JWT secret (default ./.strata)",
	"STRATA_ADDR":                      "listen address of serve (default :8080)",
	"STRATA_ROLES":                     "roles of serve: command,query,projector (default all)",
	"STRATA_JWT_SECRET":                "HS256 secret (>= 32 bytes); unset = a generated secret kept in STRATA_DATA_DIR (development); refused together with STRATA_OIDC_ISSUER",
	"STRATA_AUTO_MIGRATE":              "apply pending migrations when serve starts (default true)",
	"STRATA_LOG_LEVEL":                 "debug, info, warn or error (default info)",
	"STRATA_DB_MAX_CONNS":              "connections per pool (default 8)",
	"STRATA_GROUP_COMMIT":              "group commit of concurrent appends in the PostgreSQL store: on (default), off, or on,max_batch=64,max_wait=0s,in_flight=2",
	"STRATA_EVENT_STORE":               "postgres (default) or an esdb:// URL of EventStoreDB/KurrentDB; idempotency records and read models stay in PostgreSQL",
	"STRATA_ESDB_NAMESPACE":            "prefix of strata's streams in EventStoreDB (default strata)",
	"STRATA_RATE_COMMANDS":             "per-tenant command rate, e.g. 100/s,burst=200 (default), or unlimited",
	"STRATA_RATE_QUERIES":              "per-tenant query rate, e.g. 500/s,burst=1000 (default), or unlimited",
	"STRATA_RATE_OVERRIDES":            "per-tenant rates, e.g. acme:commands=500/s,burst=1000; beta:queries=10/s",
	"STRATA_MAX_IN_FLIGHT":             "authenticated requests served at once, all tenants together, before shedding with 503 (default 256)",
	"STRATA_TLS_CERT":                  "PEM certificate chain: serve speaks HTTPS (TLS 1.2+) on every listener (API, metrics, pprof); reloaded when the file changes (with STRATA_TLS_KEY)",
	"STRATA_TLS_KEY":                   "PEM private key of STRATA_TLS_CERT",
	"STRATA_OPS_TLS_CLIENT_CA":         "PEM CA certificates: the metrics and pprof listeners require a client certificate signed by one (needs STRATA_TLS_CERT)",
	"STRATA_PPROF_ADDR":                "serve Go's pprof profiles on this separate address, e.g. 127.0.0.1:6060 (default off)",
	"STRATA_METRICS_ADDR":              "serve Prometheus metrics (/metrics, unauthenticated) on this separate address, e.g. :9090 (default off)",
	"STRATA_PROJECTION_BATCH":          "most events a projection applies per transaction (default 500)",
	"STRATA_PROJECTION_PARTITIONS":     "projections split into partitions that projector processes share, as projection=count (a power of two from 2 to 16), comma-separated; the projection must declare itself Partitionable and the database needs `strata migrate partition-log` once (docs/scaling.md)",
	"STRATA_PROJECTION_GATHER":         "shortest time between two batches a projection (or the group) applies at the head while appends keep waking it: a longer one gathers more events per transaction, at that much more read-model lag (default 5ms)",
	"STRATA_PROJECTION_GROUP":          "run every projection on one session, one read and one transaction per wake-up (default true; false: one runner session per projection)",
	"STRATA_PROJECTION_POLL":           "how often projection runners read the log when nothing wakes them, e.g. 1s or 250ms (default 1s)",
	"STRATA_PROJECTION_RETRY_ATTEMPTS": "attempts at an event a projection cannot apply before its stream stays parked in the dead-letter store (default 5)",
	"STRATA_PROJECTION_RETRY_INITIAL":  "pause before the first retry of a parked stream, doubling after each failure (default 200ms)",
	"STRATA_PROJECTION_RETRY_MAX":      "longest pause between retries of a parked stream (default 10s)",
	"STRATA_RELAY":                     "integration-event relay of the projector role: off, sql (watermill-sql on strata's PostgreSQL) or nats (default nats when STRATA_RELAY_URL is set, else off); docs/relay.md",
	"STRATA_RELAY_URL":                 "NATS URL of the relay, e.g. nats://nats:4222: committed events are published to NATS JetStream",
	"STRATA_RELAY_TOPIC":               "relay topic: JetStream stream and subject prefix (default strata_events; the sql relay supports only the default)",
	"STRATA_RELAY_MAX_MESSAGE_BYTES":   "most a relayed message may weigh (payload and metadata) before its event's stream is parked for its tenant in the dead-letter store (default 0: the transport's own limit, NATS's max_payload); docs/relay.md",

	// Tokens from an identity provider (docs/operations.md, "Identity provider").
	"STRATA_OIDC_ISSUER":           "issuer URL of the identity provider whose tokens strata accepts (RS256/ES256/EdDSA, keys from its JWKS, found by OpenID Connect discovery); tokens' iss must equal it",
	"STRATA_OIDC_JWKS_URL":         "the provider's JWKS URL, when discovery is not wanted (default: the discovery document's jwks_uri)",
	"STRATA_OIDC_AUDIENCE":         "the aud a provider's token must carry to be meant for strata (required with STRATA_OIDC_ISSUER)",
	"STRATA_OIDC_TENANT_CLAIM":     "the claim holding the token's tenant, a dotted path into objects allowed, e.g. tenant (default), ext.tenant, client_id",
	"STRATA_OIDC_SCOPE_CLAIMS":     "comma-separated claims holding scopes, each a space-delimited string or an array of strings (default scope,scp)",
	"STRATA_OIDC_SCOPE_PREFIX":     "prefix that marks strata's scopes among the provider's, e.g. strata: for strata:admin (default none); cross_tenant grants cross-tenant reads",
	"STRATA_OIDC_JWKS_REFRESH":     "how often the provider's keys are fetched again; a key it drops stops verifying within this (default 5m)",
	"STRATA_OIDC_JWKS_MIN_REFRESH": "least time between two key fetches: a token naming an unknown key prompts one at most this often, and a failed fetch is retried this often (default 10s)",
	"STRATA_OIDC_JWKS_MAX_AGE":     "how long keys keep verifying while the provider cannot be reached, from the last good fetch (default 24h; then every token is refused and /readyz fails)",

	// What one tenant may hold of the shared capacity, and how long a body may take to arrive.
	"STRATA_TENANT_IN_FLIGHT_COMMANDS":  "command requests one tenant may have in flight, body upload included, before 429 (default 32, or unlimited)",
	"STRATA_TENANT_IN_FLIGHT_QUERIES":   "query and admin requests one tenant may have in flight, body upload included, before 429 (default 64, or unlimited)",
	"STRATA_TENANT_IN_FLIGHT_WAITS":     "queries of one tenant waiting for a consistency token at once, before 429 (default 16, or unlimited)",
	"STRATA_TENANT_IN_FLIGHT_OVERRIDES": "per-tenant in-flight limits, e.g. acme:commands=128; beta:waits=4",
	"STRATA_BODY_TIMEOUT":               "how long a request body may take to arrive before 408 (default 5s)",

	// The tenant directory (docs/tenants.md).
	"STRATA_REQUIRE_TENANT_DIRECTORY": "serve only tenants that are active in the tenant directory (403 tenant_unknown otherwise); unset = the installation's setting: on for installations created with migration 008, off for older ones",
	"STRATA_TENANT_DIRECTORY_RELOAD":  "how often a serving process reloads the whole tenant directory, the safety net under the push (default 10s)",
	"STRATA_PLACEMENT_RELOAD":         "how often a serving process reads the placements (strata placements add) to serve the ones added since it started (default 10s)",
	"STRATA_TENANT_DIRECTORY_LEASE":   "a serving process's membership lease in the erasure's acknowledgement barrier: it heartbeats every third of it and refuses every tenant (503) when it could not heartbeat within it (default 10s; 0 turns membership off)",

	// Tiers, tenant-aware metrics, connection share and retention (docs/tenants.md).
	"STRATA_TENANT_POOL_SHARE":               "fraction of the serving pool (STRATA_DB_MAX_CONNS) one tenant's requests may hold at once; its other requests wait for its share (default 0.5; 1 = off)",
	"STRATA_TENANT_POOL_WAIT":                "how long a request waits for its tenant's share of the pool before 429 (default 2s)",
	"STRATA_METRICS_COHORT_CAP":              "most cohort tenants one process labels with tenant_id on the tenant-aware series; beyond it they count under tenant_id=\"\" (default 50)",
	"STRATA_HEAVY_HITTERS_WINDOW":            "rolling window of the heavy hitters (top tenants by commands, queries, events) in /metrics and GET /v1/platform/heavy-hitters (default 5m, in 1m buckets)",
	"STRATA_HEAVY_HITTERS_TOP":               "how many tenants per kind the heavy hitters show in /metrics (default 10)",
	"STRATA_RETENTION":                       "run the retention job in the projector role: on (default) or off",
	"STRATA_RETENTION_INTERVAL":              "pause between passes of the retention job (default 1h)",
	"STRATA_RETENTION_BATCH":                 "rows the retention job deletes per transaction (default 1000)",
	"STRATA_RETENTION_IDEMPOTENCY_RECORDS":   "default window of idempotency records, e.g. 30d, 36h or keep (default 30d; a key retried after it is a new command)",
	"STRATA_RETENTION_RESOLVED_DEAD_LETTERS": "default window of resolved (retried, discarded, superseded) dead letters (default 90d, or keep)",
	"STRATA_RETENTION_AUDIT":                 "default window of a tenant's admin_audit rows (default 365d, or keep)",

	// Export jobs of the platform API and the platform's own retention (docs/tenants.md).
	"STRATA_EXPORT_MAX_RUNNING_PER_TENANT": "export jobs of one tenant running at once, all serving processes together, before 429 (default 1)",
	"STRATA_EXPORT_MAX_RUNNING":            "export jobs of all tenants running at once on the database, before 429 (default 2; at most half of STRATA_DB_MAX_CONNS)",
	"STRATA_EXPORT_RETENTION":              "how long a finished export job and its archive are kept, e.g. 24h (default 24h, at least 1m); then 404 and deleted",
	"STRATA_RETENTION_PLATFORM_AUDIT":      "window of tenant_audit, the platform calls' record, e.g. 365d or keep (default 365d)",
	"STRATA_PLATFORM_RETENTION_INTERVAL":   "pause between the serving processes' passes deleting expired export jobs and tenant_audit rows (default 10m)",

	// The archive store of cold tenants (docs/tenants.md, "Archive").
	"STRATA_BACKUP_RETENTION":         "how long the deployment keeps its backups (35d, 72h): dates when the backups taken before a subject's erasure stop holding their key (unset: the receipt says it is the deployment's retention)",
	"STRATA_KEK_FILE":                 "a file holding the key-encryption key (32 bytes, base64 or hex) that wraps the data keys of personal data (unset: a key held in each database; docs/personal-data.md)",
	"STRATA_KEK_AWS_KMS_KEY":          "an AWS KMS key (ID, ARN or alias) that wraps the data keys of personal data, instead of STRATA_KEK_FILE's; reached with the AWS SDK's settings (AWS_REGION, AWS_ENDPOINT_URL_KMS, credentials; docs/personal-data.md)",
	"STRATA_ARCHIVE_S3_ENDPOINT":      "the archive store's S3 endpoint, http:// or https:// (unset: no archive store)",
	"STRATA_ARCHIVE_S3_BUCKET":        "the archive store's bucket",
	"STRATA_ARCHIVE_S3_REGION":        "the archive store's region (empty for servers that ignore it)",
	"STRATA_ARCHIVE_S3_ACCESS_KEY":    "the archive store's access key (with the secret key; both unset: anonymous)",
	"STRATA_ARCHIVE_S3_SECRET_KEY":    "the archive store's secret key",
	"STRATA_ARCHIVE_S3_CREATE_BUCKET": "true: create the bucket when it does not exist (default false)",

	// Process managers (docs/process-managers.md). A module's own settings
	// (the fulfilment module's payments, say) are declared by the module
	// (module.Module.Settings), not here.
	"STRATA_PROCESSES":        "process managers the projector role runs: all (default), none, or a comma-separated list of names (e.g. fulfilment)",
	"STRATA_PROCESS_POLL":     "how often process managers look at the log, their outbox and their deadlines when nothing wakes them (default 1s)",
	"STRATA_PROCESS_ATTEMPTS": "attempts at a process step (command or provider call) that fails transiently before its instance is parked in the dead-letter store (default 5)",
}

func (e env) str(name, def string) string {
	if _, ok := envVars[name]; !ok {
		panic("undocumented environment variable " + name)
	}
	if v := strings.TrimSpace(e.get(name)); v != "" {
		return v
	}
	return def
}

func (e env) boolean(name string, def bool) (bool, error) {
	v := e.str(name, "")
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

func (e env) integer(name string, def int) (int, error) {
	v := e.str(name, "")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", name, v)
	}
	return n, nil
}

func (e env) dataDir() (string, error) {
	dir, err := filepath.Abs(e.str("STRATA_DATA_DIR", ".strata"))
	if err != nil {
		return "", fmt.Errorf("STRATA_DATA_DIR: %w", err)
	}
	return dir, nil
}

// newLogger returns the process logger: JSON lines on w.
func newLogger(e env, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(e.str("STRATA_LOG_LEVEL", "info"))); err != nil {
		return nil, fmt.Errorf("STRATA_LOG_LEVEL: want debug, info, warn or error")
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})), nil
}

// jwtSecret returns STRATA_JWT_SECRET, or the development secret kept in
// the data directory (generated on first use). dev reports the latter.
func (e env) jwtSecret() (secret []byte, dev bool, err error) {
	if s := e.str("STRATA_JWT_SECRET", ""); s != "" {
		if len(s) < auth.MinSecretLen {
			return nil, false, fmt.Errorf("STRATA_JWT_SECRET must be at least %d bytes", auth.MinSecretLen)
		}
		return []byte(s), false, nil
	}
	dir, err := e.dataDir()
	if err != nil {
		return nil, false, err
	}
	s, err := auth.LoadOrCreateSecret(dir)
	return s, true, err
}

// embeddedDatabase is the database strata creates in its embedded server.
const embeddedDatabase = "strata"

// database returns the URL to use: DATABASE_URL, or a private PostgreSQL
// started (or reused) under the data directory. stop shuts down a server
// this call started; it is a no-op otherwise.
func (e env) database(ctx context.Context, logger *slog.Logger) (url string, embedded *pgembed.Server, stop func(), err error) {
	if u := e.str("DATABASE_URL", ""); u != "" {
		return u, nil, func() {}, nil
	}
	if e.str("STRATA_APP_DATABASE_URL", "") != "" || e.str("STRATA_PROJECTOR_DATABASE_URL", "") != "" {
		// Serving URLs name an external database: never start a private one
		// beside it.
		return "", nil, nil, errNoOwnerURL
	}
	dir, err := e.dataDir()
	if err != nil {
		return "", nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, nil, fmt.Errorf("create data directory %s: %w", dir, err)
	}
	pg, err := embeddedDataDir(dir)
	if err != nil {
		return "", nil, nil, fmt.Errorf("start the embedded PostgreSQL (or set DATABASE_URL): %w", err)
	}
	if pg.moved != "" {
		logger.Info("embedded PostgreSQL data is outside STRATA_DATA_DIR, where the postgres OS user can reach it (`make db/reset` deletes it)",
			"data", pg.path, "data_dir", dir, "reason", pg.moved)
	}
	srv, err := pgembed.Start(ctx, pgembed.Config{
		DataDir: pg.path,
		Mode:    pgembed.Daemon,
		Logf:    func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return "", nil, nil, fmt.Errorf("start the embedded PostgreSQL (or set DATABASE_URL): %w", err)
	}
	if err := createDatabase(ctx, srv.URL(), embeddedDatabase); err != nil {
		return "", nil, nil, err
	}
	stop = func() {
		if srv.Reused() {
			return // another strata process started it and will stop it
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			logger.Warn("stop embedded PostgreSQL", "error", err.Error())
		}
	}
	return srv.URLFor(embeddedDatabase), srv, stop, nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to the embedded PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}
