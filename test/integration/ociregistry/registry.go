// Package ociregistry serves a real OCI distribution registry (go-containerregistry's
// pkg/registry, blobs in memory) on a loopback port, optionally behind HTTP basic auth, for the
// local control plane and its tests.
package ociregistry

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Server is a running registry.
type Server struct {
	// Host is HOST:PORT, the registry part of image references pushed to it.
	Host string

	srv  *http.Server
	done chan error
}

// Start serves a registry on 127.0.0.1 at a free port. Non-empty username makes every request
// need those basic-auth credentials.
func Start(username, password string) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the OCI registry on 127.0.0.1: %w", err)
	}
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if username != "" {
		h = RequireBasicAuth(h, username, password)
	}
	s := &Server{
		Host: ln.Addr().String(),
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the registry; what was pushed to it is gone.
func (s *Server) Close() error {
	// Close, not Shutdown: a client's dialled but unused connection would hold Shutdown for 5 s,
	// and nothing in flight needs to finish.
	if err := s.srv.Close(); err != nil {
		return fmt.Errorf("stopping the OCI registry on %s: %w", s.Host, err)
	}
	if err := <-s.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("OCI registry on %s: %w", s.Host, err)
	}
	return nil
}

// RequireBasicAuth answers a request without these credentials 401 with a Basic challenge and
// the registry's UNAUTHORIZED error body, as a private registry does, and passes the others to
// next.
func RequireBasicAuth(next http.Handler, username, password string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		// Both compared whatever the first gives, so the time taken says nothing of which differed.
		userOK := subtle.ConstantTimeCompare([]byte(u), []byte(username)) == 1
		passOK := subtle.ConstantTimeCompare([]byte(p), []byte(password)) == 1
		if !ok || !userOK || !passOK {
			w.Header().Set("WWW-Authenticate", `Basic realm="inplace-rollout local registry"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}
