package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/strata-es/strata/httpapi"
)

// serveMetrics serves the Prometheus metrics on their own address
// (STRATA_METRICS_ADDR), never on the API's: they are unauthenticated and
// describe every tenant's traffic together, so they belong on an address
// that only the scraper reaches (a pod port, loopback), like pprof. It
// returns the scrape URL and a function that stops the listener.
func serveMetrics(addr string, tlsCfg *tls.Config, h http.Handler, logger *slog.Logger) (url string, stop func(), err error) {
	ln, err := listen(addr, tlsCfg)
	if err != nil {
		return "", nil, fmt.Errorf("listen on STRATA_METRICS_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := httpapi.NewServer(addr, mux)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener failed", "addr", addr, "error", err.Error())
		}
	}()
	url = scheme(tlsCfg) + displayAddr(ln.Addr()) + "/metrics"
	logger.Info("metrics listening", "url", url)
	return url, func() { _ = srv.Close() }, nil
}
