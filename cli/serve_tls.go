package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// listenerTLS is serve's TLS: the certificate of every listener (the API's,
// STRATA_METRICS_ADDR's, STRATA_PPROF_ADDR's), reloaded when its files
// change, and the client certificates the operator listeners (metrics,
// pprof) require when STRATA_OPS_TLS_CLIENT_CA is set.
type listenerTLS struct {
	api, ops *tls.Config // nil: plain HTTP
}

// tlsSettings reads STRATA_TLS_CERT, STRATA_TLS_KEY and
// STRATA_OPS_TLS_CLIENT_CA.
func (e env) tlsSettings(logger *slog.Logger) (listenerTLS, error) {
	certFile, keyFile := e.str("STRATA_TLS_CERT", ""), e.str("STRATA_TLS_KEY", "")
	clientCA := e.str("STRATA_OPS_TLS_CLIENT_CA", "")
	if certFile == "" && keyFile == "" {
		if clientCA != "" {
			return listenerTLS{}, errors.New("STRATA_OPS_TLS_CLIENT_CA needs STRATA_TLS_CERT and STRATA_TLS_KEY: client certificates are asked for in a TLS handshake")
		}
		return listenerTLS{}, nil
	}
	if certFile == "" || keyFile == "" {
		return listenerTLS{}, errors.New("STRATA_TLS_CERT and STRATA_TLS_KEY go together: the certificate chain and its private key, PEM files")
	}
	r, err := newCertReloader(certFile, keyFile, logger)
	if err != nil {
		return listenerTLS{}, err
	}
	api := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.get,
		// HTTP/1.1 only: the API's listener rewrites net/http's own
		// plain-text answers on the decrypted stream (httpapi.ServerAnswers),
		// which net/http's HTTP/2 would bypass.
		NextProtos: []string{"http/1.1"},
	}
	ops := api.Clone()
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return listenerTLS{}, fmt.Errorf("STRATA_OPS_TLS_CLIENT_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return listenerTLS{}, fmt.Errorf("STRATA_OPS_TLS_CLIENT_CA: %s holds no PEM certificate", clientCA)
		}
		ops.ClientCAs, ops.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return listenerTLS{api: api, ops: ops}, nil
}

// listen listens on addr, with TLS when cfg is set.
func listen(addr string, cfg *tls.Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil || cfg == nil {
		return ln, err
	}
	return tls.NewListener(ln, cfg), nil
}

// scheme is the URL scheme of a listener with cfg.
func scheme(cfg *tls.Config) string {
	if cfg == nil {
		return "http://"
	}
	return "https://"
}

// certReloader serves a certificate from files and loads them again when
// they change (a renewal by cert-manager, certbot or an operator): it looks
// at most once a second, on a handshake. A pair that does not load (the
// files are being written, or do not match) leaves the one in use, and is
// logged.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // of the files loaded, or last refused
	checked time.Time
}

// certCheckEvery is how often a handshake looks at the files.
const certCheckEvery = time.Second

func newCertReloader(certFile, keyFile string, logger *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger}
	stamp, err := r.fileStamp()
	if err != nil {
		return nil, fmt.Errorf("STRATA_TLS_CERT / STRATA_TLS_KEY: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("STRATA_TLS_CERT / STRATA_TLS_KEY: %w", err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, time.Now()
	return r, nil
}

// fileStamp identifies the files' current contents by size and time.
func (r *certReloader) fileStamp() (string, error) {
	var s string
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%d:%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < certCheckEvery {
		return r.cert, nil
	}
	r.checked = time.Now()
	stamp, err := r.fileStamp()
	if err != nil || stamp == r.stamp {
		return r.cert, nil
	}
	r.stamp = stamp
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.logger.Warn("the TLS certificate files changed but do not load; serving the previous certificate", "cert", r.certFile, "error", err.Error())
		return r.cert, nil
	}
	r.cert = &cert
	r.logger.Info("TLS certificate reloaded", "cert", r.certFile)
	return r.cert, nil
}
