package esdb

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	rpcerrors "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/errors"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// recordsConn is the adapter's own gRPC connection for KurrentDB's v2
// StreamsService (AppendRecords: multi-stream appends with consistency
// checks, KurrentDB 25.1 and later). EventStore-Client-Go v4 has no such
// call and does not expose its connection, so the adapter dials the node
// itself, from the same parsed configuration and as the client would
// (esdb/impl.go createGrpcConnection):
//
//   - transport: plain when the connection string says tls=false;
//     otherwise TLS with the configured root CAs (tlsCAFile),
//     tlsVerifyCert=false as InsecureSkipVerify, and the user certificate
//     (userCertFile/userKeyFile) as client certificate;
//   - credentials: the connection string's user and password as basic
//     authentication on every call, only over TLS (the client sends none
//     on a plain connection either);
//   - keepalive and the default deadline (10 s) of the client.
//
// It is deliberately simpler than the client's discovery: it dials the
// single host of the connection string (or, for a cluster, the first gossip
// seed, the next one after a failure: every node serves gRPC on its HTTP
// port), asks for the leader with the requires-leader header, and when a
// follower answers NOT_LEADER_NODE it redials the leader the error names and
// retries once. grpc.NewClient does no I/O: the connection is made by the
// first call.
type recordsConn struct {
	cfg *esdb.Configuration
	red redactor

	mu      sync.Mutex
	cc      *grpc.ClientConn
	target  string
	next    int // index into targets() of the next seed to try
	closed  bool
	leaders int // redirects followed, for tests
}

func newRecordsConn(cfg *esdb.Configuration, red redactor) *recordsConn {
	return &recordsConn{cfg: cfg, red: red}
}

// targets are the addresses the configuration names, in order.
func (r *recordsConn) targets() []string {
	if len(r.cfg.GossipSeeds) == 0 {
		return []string{r.cfg.Address}
	}
	out := make([]string, len(r.cfg.GossipSeeds))
	for i, s := range r.cfg.GossipSeeds {
		out[i] = s.String()
	}
	return out
}

// client returns the connection, dialing target (or the next seed when
// target is "") if there is none.
func (r *recordsConn) client(target string) (v2.StreamsServiceClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if r.cc != nil && (target == "" || target == r.target) {
		return v2.NewStreamsServiceClient(r.cc), nil
	}
	if target == "" {
		ts := r.targets()
		target = ts[r.next%len(ts)]
	}
	cc, err := r.dial(target)
	if err != nil {
		return nil, err
	}
	if r.cc != nil {
		_ = r.cc.Close()
	}
	r.cc, r.target = cc, target
	return v2.NewStreamsServiceClient(cc), nil
}

func (r *recordsConn) dial(target string) (*grpc.ClientConn, error) {
	var transport credentials.TransportCredentials
	if r.cfg.DisableTLS {
		transport = insecure.NewCredentials()
	} else {
		tc := &tls.Config{InsecureSkipVerify: r.cfg.SkipCertificateVerification, RootCAs: r.cfg.RootCAs}
		if r.cfg.UserCertFile != "" && r.cfg.UserKeyFile != "" {
			cert, err := tls.LoadX509KeyPair(r.cfg.UserCertFile, r.cfg.UserKeyFile)
			if err != nil {
				return nil, fmt.Errorf("load the user certificate: %s", r.red.redact(err.Error()))
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		transport = credentials.NewTLS(tc)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(transport)}
	if r.cfg.KeepAliveInterval >= 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: r.cfg.KeepAliveInterval, Timeout: r.cfg.KeepAliveTimeout, PermitWithoutStream: true}))
	}
	if r.cfg.Username != "" && r.cfg.Password != "" && !r.cfg.DisableTLS {
		opts = append(opts, grpc.WithPerRPCCredentials(newBasicAuth(r.cfg.Username, r.cfg.Password)))
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %s", target, r.red.redact(err.Error()))
	}
	return cc, nil
}

// forget drops the connection after a transport failure, so the next call
// dials again (the next seed, for a cluster).
func (r *recordsConn) forget(target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cc != nil && r.target == target {
		_ = r.cc.Close()
		r.cc, r.target = nil, ""
		r.next++
	}
}

func (r *recordsConn) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.cc != nil {
		_ = r.cc.Close()
		r.cc = nil
	}
}

// errServerTooOld is returned when the node does not implement
// AppendRecords.
var errServerTooOld = fmt.Errorf("%w: multi-stream appends, tags and append conditions on EventStoreDB need KurrentDB 25.1 or later (the server does not implement StreamsService.AppendRecords)", ErrUnsupported)

// appendRecords calls AppendRecords on the leader. Its error is the gRPC
// status (for the caller to read the consistency violations from), or
// errServerTooOld, or ErrClosed, or a context error.
func (r *recordsConn) appendRecords(ctx context.Context, req *v2.AppendRecordsRequest) (*v2.AppendRecordsResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		d := 10 * time.Second
		if r.cfg.DefaultDeadline != nil {
			d = *r.cfg.DefaultDeadline
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "requires-leader", "true")
	target := ""
	for attempt := 0; ; attempt++ {
		c, err := r.client(target)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		used := r.target
		r.mu.Unlock()
		resp, err := c.AppendRecords(ctx, req)
		if err == nil {
			return resp, nil
		}
		st, _ := status.FromError(err)
		switch st.Code() {
		case codes.Unimplemented:
			return nil, errServerTooOld
		case codes.Unavailable:
			r.forget(used)
		case codes.FailedPrecondition:
			if leader := notLeader(st); leader != "" && attempt == 0 {
				r.mu.Lock()
				r.leaders++
				r.mu.Unlock()
				target = leader
				continue
			}
		}
		return nil, err
	}
}

// notLeader returns the leader's address from a NOT_LEADER_NODE error, or
// "".
func notLeader(st *status.Status) string {
	for _, d := range st.Details() {
		if nl, ok := d.(*rpcerrors.NotLeaderNodeErrorDetails); ok && nl.GetCurrentLeader().GetHost() != "" {
			l := nl.GetCurrentLeader()
			return net.JoinHostPort(l.GetHost(), strconv.Itoa(int(l.GetPort())))
		}
	}
	return ""
}

// basicAuth sends the connection string's credentials with every call, as
// the client does (RequireTransportSecurity: never over a plain
// connection).
type basicAuth string

func newBasicAuth(user, password string) basicAuth {
	return basicAuth("Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password)))
}

func (b basicAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(b)}, nil
}

func (basicAuth) RequireTransportSecurity() bool { return true }
