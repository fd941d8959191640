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
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Server is a running registry.
type Server struct {
	// Host is HOST:PORT, the registry part of image references pushed to it.
	Host string

	// handler holds what was pushed; it outlives a Stop, so a Resume serves the same content.
	handler http.Handler
	mu      sync.Mutex
	srv     *http.Server // nil while stopped
	done    chan error
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
	s := &Server{Host: ln.Addr().String(), handler: h}
	s.serve(ln)
	return s, nil
}

func (s *Server) serve(ln net.Listener) {
	s.srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan error, 1)
	go func(srv *http.Server, done chan error) { done <- srv.Serve(ln) }(s.srv, s.done)
}

// Stop closes the listener and every connection, so that clients find the registry unreachable
// (connection refused), and keeps what was pushed for Resume. Stopping a stopped registry does
// nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return nil
	}
	// Close, not Shutdown: a client's dialled but unused connection would hold Shutdown for 5 s,
	// and nothing in flight needs to finish.
	err := s.srv.Close()
	if err == nil {
		if err = <-s.done; errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	s.srv = nil
	if err != nil {
		return fmt.Errorf("stopping the OCI registry on %s: %w", s.Host, err)
	}
	return nil
}

// Resume serves the registry again on the same HOST:PORT, with the content it had when it was
// stopped. Resuming a running registry does nothing.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.Host)
	if err != nil {
		return fmt.Errorf("listening again for the OCI registry on %s: %w", s.Host, err)
	}
	s.serve(ln)
	return nil
}

// Close stops the registry; what was pushed to it is gone.
func (s *Server) Close() error {
	return s.Stop()
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
