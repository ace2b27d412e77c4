package httpapi

import (
	"net/http"
	"time"
)

// NewServer returns an http.Server with every timeout set: a slow client
// cannot hold a connection (slowloris) or a goroutine forever.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second, // queries may wait up to 10 s for consistency
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}
