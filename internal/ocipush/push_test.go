package ocipush

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/inplace-rollout/inplace-rollout/test/integration/ociregistry"
)

// writeLayout writes a layout holding one random two-image index and returns its directory and
// the index's digest.
func writeLayout(t *testing.T) (string, string) {
	t.Helper()
	idx, err := random.Index(256, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dir, d.String()
}

func startRegistry(t *testing.T) string {
	t.Helper()
	r, err := ociregistry.Start("", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	return r.Host
}

// TestPush pushes a layout to a real registry: the reference returned names the index by its
// digest, and the registry serves that index under the tag and under the digest.
func TestPush(t *testing.T) {
	host := startRegistry(t)
	dir, digest := writeLayout(t)
	got, err := Push(context.Background(), dir, host+"/inplace-rollout/inplace-rollout:dev")
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	if want := host + "/inplace-rollout/inplace-rollout@" + digest; got != want {
		t.Fatalf("Push returned %s, want %s", got, want)
	}
	for _, ref := range []string{got, host + "/inplace-rollout/inplace-rollout:dev"} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(r)
		if err != nil {
			t.Fatalf("pulling %s: %v", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if d.String() != digest {
			t.Fatalf("%s serves %s, want %s", ref, d, digest)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, desc := range m.Manifests {
			if _, err := remote.Image(r.Context().Digest(desc.Digest.String())); err != nil {
				t.Fatalf("the registry lacks the image %s of the index: %v", desc.Digest, err)
			}
		}
	}
}

// TestPushErrors: a reference without a tag, a directory that is no layout, and a layout holding
// two entries are refused before anything is pushed, each with an error naming the problem.
func TestPushErrors(t *testing.T) {
	host := startRegistry(t)
	good, _ := writeLayout(t)
	two, _ := writeLayout(t)
	extra, err := random.Index(64, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(two)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(extra); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, repo, tag, want string
	}{
		{"no tag", good, host + "/inplace-rollout/inplace-rollout", "", "REGISTRY/REPOSITORY:TAG"},
		{"no layout", t.TempDir(), host + "/x/y", ":dev", "make image writes it"},
		{"two entries", two, host + "/x/z", ":dev", "holds 2 entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Push(context.Background(), tc.dir, tc.repo+tc.tag)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Push(%s, %s) = %v, want an error containing %q", tc.dir, tc.repo+tc.tag, err, tc.want)
			}
			repo, err := name.NewRepository(tc.repo)
			if err != nil {
				t.Fatal(err)
			}
			if tags, err := remote.List(repo); err == nil && len(tags) > 0 {
				t.Fatalf("a refused push left tags %v in %s", tags, repo)
			}
		})
	}
}
