package ociregistry

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestStopRefusesAndResumeServesTheSameContent pushes an image, stops the registry, and checks
// that it is unreachable while stopped and serves the image again, on the same host, once
// resumed.
func TestStopRefusesAndResumeServesTheSameContent(t *testing.T) {
	tests := []struct{ name, username, password string }{
		{"anonymous", "", ""},
		{"basic auth", "puller", "secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Start(tt.username, tt.password)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			})
			var opts []remote.Option
			if tt.username != "" {
				opts = append(opts, remote.WithAuth(&authn.Basic{Username: tt.username, Password: tt.password}))
			}
			ref, err := name.ParseReference(s.Host+"/app:v1", name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			img, err := random.Image(64, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(ref, img, opts...); err != nil {
				t.Fatalf("pushing %s: %v", ref, err)
			}
			want, err := img.Digest()
			if err != nil {
				t.Fatal(err)
			}

			host := s.Host
			for i := range 2 { // a second Stop and Resume do the same
				if err := s.Stop(); err != nil {
					t.Fatalf("stop %d: %v", i, err)
				}
				if err := s.Stop(); err != nil {
					t.Fatalf("stopping a stopped registry: %v", err)
				}
				if d, err := remote.Head(ref, opts...); err == nil {
					t.Fatalf("stopped registry answered %s with %s", ref, d.Digest)
				}
				if err := s.Resume(); err != nil {
					t.Fatalf("resume %d: %v", i, err)
				}
				if err := s.Resume(); err != nil {
					t.Fatalf("resuming a running registry: %v", err)
				}
				d, err := remote.Head(ref, opts...)
				if err != nil {
					t.Fatalf("resumed registry: %s: %v", ref, err)
				}
				if d.Digest != want || s.Host != host {
					t.Errorf("resumed registry on %s serves %s as %s; want %s on %s", s.Host, ref, d.Digest, want, host)
				}
			}
		})
	}
}
