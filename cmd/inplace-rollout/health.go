package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// serveHealth serves handler on addr in the background until the returned stop is called; an
// empty addr serves nothing. An address that cannot be listened on is bad input.
func serveHealth(addr string, handler http.Handler, log *slog.Logger) (stop func(), err error) {
	return serveHTTP(addr, "--health-addr", handler, log)
}

// serveHTTP is serveHealth for the address that what (a flag or a variable) gives.
func serveHTTP(addr, what string, handler http.Handler, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, badInput("%s %s: %v", what, addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP endpoint stopped", "addr", addr, "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// healthHandler answers /healthz while the process runs and /readyz once synced says the
// controller has listed what it watches; until then /readyz answers notYet. metrics, when not
// nil, serves /metrics.
func healthHandler(synced func() bool, notYet string, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced() {
			http.Error(w, notYet, http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	return mux
}
