package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// machineNATS is where HOSTILE looks for a NATS server with JetStream
// first (the relay tests look there too).
const machineNATS = "nats://127.0.0.1:4222"

// natsBroker is the NATS JetStream server of HOSTILE: the machine's when it
// answers with JetStream, otherwise an embedded nats-server of the
// harness, with its store under the run's directory. Never a skip: the
// scenario's promise is about a broker, so it needs one.
type natsBroker struct {
	url      string
	embedded *server.Server
}

func startBroker(dir string, logf func(string, ...any)) (*natsBroker, error) {
	if nc, err := nats.Connect(machineNATS, nats.Timeout(time.Second)); err == nil {
		js, jerr := nc.JetStream()
		if jerr == nil {
			_, jerr = js.AccountInfo()
		}
		nc.Close()
		if jerr == nil {
			logf("HOSTILE: NATS JetStream on %s", machineNATS)
			return &natsBroker{url: machineNATS}, nil
		}
	}
	store := filepath.Join(dir, "nats")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, err
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: store, NoSigs: true, NoLog: true})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats-server: not ready after 10s")
	}
	logf("HOSTILE: no JetStream on %s: an embedded nats-server on %s", machineNATS, ns.ClientURL())
	return &natsBroker{url: ns.ClientURL(), embedded: ns}, nil
}

func (b *natsBroker) close() {
	if b.embedded != nil {
		b.embedded.Shutdown()
		b.embedded.WaitForShutdown()
	}
}

// deleteStream removes the run's JetStream stream (the machine's server is
// shared; the topic is the run's own).
func (b *natsBroker) deleteStream(topic string) {
	nc, err := nats.Connect(b.url, nats.Timeout(2*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	if js, err := nc.JetStream(); err == nil {
		_ = js.DeleteStream(topic)
	}
}

// brokerMessage is one message of the stream as the broker holds it.
type brokerMessage struct {
	Subject string
	Header  nats.Header
	Data    []byte
}

// messages reads every message the JetStream stream named topic holds, on
// every subject, with an ordered consumer from its first message: what a
// consumer subscribing to anything of the topic could still receive.
// A stream that does not exist holds none.
func (b *natsBroker) messages(ctx context.Context, topic string) ([]brokerMessage, error) {
	nc, err := nats.Connect(b.url, nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", b.url, err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return nil, err
	}
	info, err := js.StreamInfo(topic)
	if errors.Is(err, nats.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", topic, err)
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	sub, err := js.SubscribeSync(topic+".>", nats.OrderedConsumer(), nats.BindStream(topic), nats.DeliverAll())
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", topic, err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the connection closes anyway
	var out []brokerMessage
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			return nil, fmt.Errorf("read stream %s after %d of %d messages: %w", topic, len(out), info.State.Msgs, err)
		}
		out = append(out, brokerMessage{Subject: m.Subject, Header: m.Header, Data: m.Data})
		meta, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		if meta.NumPending == 0 {
			return out, nil
		}
	}
}
