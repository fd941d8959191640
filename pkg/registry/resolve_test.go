package registry

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	user     = "puller"
	password = "s3cret-pass-9c1e"
)

// testRegistry serves an in-process OCI registry, with basic auth when private, and counts the
// manifest requests it answers.
func testRegistry(t *testing.T, private bool) (host string, manifests *atomic.Int32) {
	t.Helper()
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	manifests = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") {
			manifests.Add(1)
		}
		if private {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), manifests
}

// push writes a random image under ref and returns its digest.
func push(t *testing.T, ref string, private bool) string {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.Anonymous
	if private {
		auth = &authn.Basic{Username: user, Password: password}
	}
	if err := remote.Write(r, img, remote.WithAuth(auth)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func pullSecret(host, pass string) *corev1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"auth": auth}}})
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "regcred"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
}

func podWith(sa string, secrets ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{ServiceAccountName: sa}}
	for _, s := range secrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return p
}

func TestDigest(t *testing.T) {
	host, _ := testRegistry(t, false)
	privHost, _ := testRegistry(t, true)
	v1 := push(t, host+"/app:v1", false)
	priv := push(t, privHost+"/app:v1", true)
	saWithSecret := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "puller"},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}}}

	tests := []struct {
		name    string
		image   string
		objects []any
		pod     *corev1.Pod
		want    string
		status  int
		wantErr []string
	}{
		{name: "a public tag", image: host + "/app:v1", pod: podWith(""), want: v1},
		{name: "a digest is its own answer", image: "reg.invalid/app@sha256:" + strings.Repeat("a", 64), pod: podWith(""),
			want: "sha256:" + strings.Repeat("a", 64)},
		{name: "a tag with a digest is the digest", image: "reg.invalid/app:v1@sha256:" + strings.Repeat("b", 64), pod: podWith(""),
			want: "sha256:" + strings.Repeat("b", 64)},
		{name: "an unknown tag", image: host + "/app:nope", pod: podWith(""), status: 404,
			wantErr: []string{host, "repository app", "HTTP 404", "MANIFEST_UNKNOWN"}},
		{name: "private with the pod's pull secret", image: privHost + "/app:v1", objects: []any{pullSecret(privHost, password)},
			pod: podWith("", "regcred"), want: priv},
		{name: "private with the service account's pull secret", image: privHost + "/app:v1",
			objects: []any{pullSecret(privHost, password), saWithSecret}, pod: podWith("puller"), want: priv},
		{name: "private with a wrong password", image: privHost + "/app:v1", objects: []any{pullSecret(privHost, "wrong-"+password)},
			pod: podWith("", "regcred"), status: 401, wantErr: []string{privHost, "repository app", "HTTP 401", "Unauthorized"}},
		{name: "private without credentials", image: privHost + "/app:v1", pod: podWith("", "missing"), status: 401,
			wantErr: []string{privHost, "HTTP 401"}},
		{name: "registry not answering", image: "127.0.0.1:1/app:v1", pod: podWith(""),
			wantErr: []string{"registry 127.0.0.1:1", "repository app", "connection refused"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			for _, o := range tt.objects {
				switch o := o.(type) {
				case *corev1.Secret:
					_, _ = client.CoreV1().Secrets("ns").Create(context.Background(), o, metav1.CreateOptions{})
				case *corev1.ServiceAccount:
					_, _ = client.CoreV1().ServiceAccounts("ns").Create(context.Background(), o, metav1.CreateOptions{})
				}
			}
			r := &Resolver{Client: client}
			got, err := r.For("ns", []*corev1.Pod{tt.pod}).Digest(context.Background(), tt.image)
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("Digest(%s) = %q, %v; want %q", tt.image, got, err, tt.want)
				}
				return
			}
			var re *Error
			if !errors.As(err, &re) {
				t.Fatalf("Digest(%s) = %q, %v; want a *registry.Error", tt.image, got, err)
			}
			if refused := tt.name == "private with a wrong password"; re.Refused() != refused {
				t.Errorf("Refused() = %v, want %v", re.Refused(), refused)
			}
			if re.Status != tt.status {
				t.Errorf("status %d, want %d (%v)", re.Status, tt.status, err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), password) || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString([]byte(user+":"))) {
				t.Errorf("error %q carries the credentials", err)
			}
		})
	}
}

func TestSessionAsksOncePerImage(t *testing.T) {
	host, manifests := testRegistry(t, false)
	push(t, host+"/app:v1", false)
	manifests.Store(0)
	s := (&Resolver{Client: fake.NewClientset()}).For("ns", nil)
	for range 5 {
		if _, err := s.Digest(context.Background(), host+"/app:v1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := manifests.Load(); n != 1 {
		t.Errorf("the registry answered %d manifest requests for one image in one session, want 1", n)
	}
	// A new session asks again: the tag may have moved.
	if _, err := (&Resolver{Client: fake.NewClientset()}).For("ns", nil).Digest(context.Background(), host+"/app:v1"); err != nil {
		t.Fatal(err)
	}
	if n := manifests.Load(); n != 2 {
		t.Errorf("manifest requests after a second session = %d, want 2", n)
	}
}

func TestCredentialsThatCannotBeReadFailEveryResolution(t *testing.T) {
	host, _ := testRegistry(t, false)
	push(t, host+"/app:v1", false)
	client := fake.NewClientset()
	client.PrependReactor("get", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("serviceaccounts"), "default", errors.New("no RBAC"))
	})
	_, err := (&Resolver{Client: client}).For("ns", []*corev1.Pod{podWith("")}).Digest(context.Background(), host+"/app:v1")
	if err == nil || !strings.Contains(err.Error(), "service account ns/default") || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("Digest = %v, want the forbidden service account named", err)
	}
}
