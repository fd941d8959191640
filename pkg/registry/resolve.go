package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultTimeout bounds one resolution: the registry's answers to a ping, a token request and a
// manifest request.
const DefaultTimeout = 10 * time.Second

// Resolver resolves image tags through their registries.
type Resolver struct {
	// Client reads the pull secrets and ServiceAccounts of the pods.
	Client kubernetes.Interface
	// Timeout bounds one resolution; zero means DefaultTimeout.
	Timeout time.Duration
	// Transport carries the registry requests; nil means go-containerregistry's default.
	Transport http.RoundTripper
}

// Session resolves images with the credentials of one set of pods and remembers each answer,
// so that a step that asks about the same tag for many pods asks the registry once. It is
// meant to live for one step: a later step asks again, as a tag may move at any time.
type Session struct {
	r         *Resolver
	namespace string
	pods      []*corev1.Pod

	mu sync.Mutex
	// kc is read from the cluster at the first resolution; credErr is why it could not be, and
	// every resolution of the session fails with it.
	kc      authn.Keychain
	credErr error
	answers map[string]answer
}

type answer struct {
	digest string
	err    error
}

// For returns a session with the pull credentials of pods in namespace: the imagePullSecrets
// each names and those of its ServiceAccount, as the kubelet uses them, read at the session's
// first resolution. Secrets that do not exist are skipped, as the kubelet skips them.
// Credentials that cannot be read (the caller may not read Secrets) make every resolution of the
// session fail with that reason.
func (r *Resolver) For(namespace string, pods []*corev1.Pod) *Session {
	return &Session{r: r, namespace: namespace, pods: pods, answers: map[string]answer{}}
}

// keychain combines, for each ServiceAccount the pods run as, its pull secrets with those the
// pods name.
func (r *Resolver) keychain(ctx context.Context, namespace string, pods []*corev1.Pod) (authn.Keychain, error) {
	secrets := map[string][]string{} // service account -> pull secrets of its pods
	for _, p := range pods {
		sa := p.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		for _, ref := range p.Spec.ImagePullSecrets {
			if ref.Name != "" && !slices.Contains(secrets[sa], ref.Name) {
				secrets[sa] = append(secrets[sa], ref.Name)
			}
		}
		if _, ok := secrets[sa]; !ok {
			secrets[sa] = nil
		}
	}
	if len(secrets) == 0 {
		secrets["default"] = nil
	}
	var kcs []authn.Keychain
	for _, sa := range slices.Sorted(maps.Keys(secrets)) {
		kc, err := kauth.New(ctx, r.Client, kauth.Options{Namespace: namespace, ServiceAccountName: sa, ImagePullSecrets: secrets[sa]})
		if err != nil {
			return nil, fmt.Errorf("reading the pull credentials of service account %s/%s and its pods' imagePullSecrets (%s): %w",
				namespace, sa, strings.Join(secrets[sa], ", "), err)
		}
		kcs = append(kcs, kc)
	}
	return authn.NewMultiKeychain(kcs...), nil
}

// Digest returns the digest of the manifest (or image index) the registry serves for image now,
// "sha256:...". An image that already names a digest is answered from the reference alone.
// Errors are *Error.
func (s *Session) Digest(ctx context.Context, image string) (string, error) {
	// One resolution at a time: concurrent pod steps asking about one tag wait for one answer.
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.answers[image]; ok {
		return a.digest, a.err
	}
	var a answer
	a.digest, a.err = s.resolve(ctx, image)
	s.answers[image] = a
	return a.digest, a.err
}

func (s *Session) resolve(ctx context.Context, image string) (string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", &Error{Image: image, Err: fmt.Errorf("not a valid image reference: %w", err)}
	}
	if d, ok := ref.(name.Digest); ok {
		return d.DigestStr(), nil
	}
	e := &Error{Image: image, Registry: ref.Context().RegistryStr(), Repository: ref.Context().RepositoryStr()}
	if s.kc == nil && s.credErr == nil {
		if s.kc, s.credErr = s.r.keychain(ctx, s.namespace, s.pods); s.credErr != nil {
			s.kc = nil
		}
	}
	if s.credErr != nil {
		e.Err = s.credErr
		return "", e
	}
	if auth, err := s.kc.Resolve(ref.Context()); err == nil && auth != authn.Anonymous {
		e.Authenticated = true
	}
	timeout := s.r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(s.kc)}
	if s.r.Transport != nil {
		opts = append(opts, remote.WithTransport(s.r.Transport))
	}
	desc, err := remote.Head(ref, opts...)
	if err == nil {
		return desc.Digest.String(), nil
	}
	// Some registries answer HEAD without the digest header, and a HEAD answer has no body to
	// say what went wrong: GET has both.
	got, err := remote.Get(ref, opts...)
	if err == nil {
		return got.Digest.String(), nil
	}
	e.Err = err
	var te *transport.Error
	if errors.As(err, &te) {
		e.Status = te.StatusCode
	}
	return "", e
}

// Error is an image that could not be resolved: it names the image, its registry and
// repository, and the HTTP status the registry answered (0: it did not answer). It never
// carries credentials.
type Error struct {
	Image, Registry, Repository string
	Status                      int
	// Authenticated says the pods' credentials held an entry for the registry, which was sent.
	Authenticated bool
	Err           error
}

// Refused reports whether the registry refused the credentials the pods have for it: they are
// wrong, not missing.
func (e *Error) Refused() bool {
	return e.Authenticated && (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden)
}

// NotFound reports whether the registry answered that it has no such tag or repository.
func (e *Error) NotFound() bool { return e.Status == http.StatusNotFound }

func (e *Error) Error() string {
	switch {
	case e.Registry == "":
		return fmt.Sprintf("resolving image %s: %v", e.Image, e.Err)
	case e.Status != 0:
		return fmt.Sprintf("resolving image %s: registry %s answered HTTP %d (%s) for repository %s: %s",
			e.Image, e.Registry, e.Status, http.StatusText(e.Status), e.Repository, diagnostic(e.Err))
	}
	return fmt.Sprintf("resolving image %s: registry %s, repository %s: %v", e.Image, e.Registry, e.Repository, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// diagnostic is what the registry said, as its error codes and messages, without the request.
func diagnostic(err error) string {
	var te *transport.Error
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return err.Error()
	}
	parts := make([]string, len(te.Errors))
	for i, d := range te.Errors {
		parts[i] = string(d.Code)
		if d.Message != "" {
			parts[i] += ": " + d.Message
		}
	}
	return strings.Join(parts, "; ")
}
