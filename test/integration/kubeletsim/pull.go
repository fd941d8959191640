package kubeletsim

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
)

// pullTimeout bounds one manifest resolution against a registry on a loopback port.
const pullTimeout = 10 * time.Second

// secretGetter reads a Secret the way the kubelet reads a pod's imagePullSecrets.
type secretGetter func(ctx context.Context, namespace, name string) (*corev1.Secret, error)

// remoteRegistries resolves the images of some registry hosts through those real registries,
// as a container runtime does, and keeps what each node pulled.
type remoteRegistries struct {
	hosts     map[string]bool
	getSecret secretGetter
	// nodes holds, per node, the images pulled onto it.
	nodes map[string]*nodeImages
}

// nodeImages is one node's image store: the content it holds (by REPO@DIGEST) and the digest each
// tag pointed at when it was pulled.
type nodeImages struct {
	byDigest map[string]bool
	byTag    map[string]string
}

func newRemoteRegistries(hosts []string, getSecret secretGetter) *remoteRegistries {
	if len(hosts) == 0 {
		return nil
	}
	r := &remoteRegistries{hosts: map[string]bool{}, getSecret: getSecret, nodes: map[string]*nodeImages{}}
	for _, h := range hosts {
		r.hosts[h] = true
	}
	return r
}

// handles reports whether img is on one of the real registries.
func (r *remoteRegistries) handles(img image) bool {
	return r != nil && r.hosts[reference.Domain(mustNamed(img.repo))]
}

// pullEnv is what a pull needs to know about the pod: where it runs and with which credentials.
type pullEnv struct {
	node, namespace string
	pullSecrets     []string
	policy          corev1.PullPolicy
}

// pullResult is the outcome of resolving one image for one container.
type pullResult struct {
	digest string
	// onNode means the node already holds the content: no pull delay.
	onNode bool
	// reason and message are the Waiting state of a failed pull (ErrImagePull, ErrImageNeverPull).
	reason, message string
}

func (r *remoteRegistries) node(name string) *nodeImages {
	n := r.nodes[name]
	if n == nil {
		n = &nodeImages{byDigest: map[string]bool{}, byTag: map[string]string{}}
		r.nodes[name] = n
	}
	return n
}

// pull resolves img as the runtime of env.node would under env.policy: IfNotPresent and Never use
// the node's copy of the reference, Always asks the registry for the manifest digest every time.
func (r *remoteRegistries) pull(img image, env pullEnv) pullResult {
	n := r.node(env.node)
	local := img.digest
	if local == "" {
		local = n.byTag[img.normalized]
	} else if !n.byDigest[img.repo+"@"+local] {
		local = ""
	}
	policy := env.policy
	if policy == "" {
		// The API server's default, for pods that did not go through it.
		policy = corev1.PullIfNotPresent
		if img.tag == "latest" && img.digest == "" {
			policy = corev1.PullAlways
		}
	}
	switch policy {
	case corev1.PullNever:
		if local == "" {
			return pullResult{reason: "ErrImageNeverPull",
				message: fmt.Sprintf("Container image %q is not present with pull policy of Never", img.normalized)}
		}
		return pullResult{digest: local, onNode: true}
	case corev1.PullIfNotPresent:
		if local != "" {
			return pullResult{digest: local, onNode: true}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
	defer cancel()
	digest, err := r.resolve(ctx, img, env)
	if err != nil {
		return pullResult{reason: "ErrImagePull", message: pullErrorMessage(img, err)}
	}
	return pullResult{digest: digest, onNode: n.byDigest[img.repo+"@"+digest]}
}

// store records that env.node now holds img at digest.
func (r *remoteRegistries) store(img image, digest string, node string) {
	n := r.node(node)
	n.byDigest[img.repo+"@"+digest] = true
	if img.digest == "" {
		n.byTag[img.normalized] = digest
	}
}

// resolve asks the registry for the manifest of img and returns its digest.
func (r *remoteRegistries) resolve(ctx context.Context, img image, env pullEnv) (string, error) {
	ref, err := name.ParseReference(img.normalized, name.Insecure)
	if err != nil {
		return "", fmt.Errorf("parsing %q for the registry: %w", img.normalized, err)
	}
	if img.digest != "" {
		// A reference with both a tag and a digest pulls by digest, as the runtime does.
		ref, err = name.NewDigest(img.repo+"@"+img.digest, name.Insecure)
		if err != nil {
			return "", fmt.Errorf("parsing %q for the registry: %w", img.repo+"@"+img.digest, err)
		}
	}
	desc, err := remote.Get(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(r.keychain(ctx, env)))
	if err != nil {
		return "", err
	}
	return desc.Digest.String(), nil
}

// keychain builds the credentials of the pod's imagePullSecrets. A Secret that is missing or
// not a docker config is skipped, as the kubelet does, and the pull goes on with what is left.
func (r *remoteRegistries) keychain(ctx context.Context, env pullEnv) authn.Keychain {
	kc := dockerConfigKeychain{}
	for _, secretName := range env.pullSecrets {
		s, err := r.getSecret(ctx, env.namespace, secretName)
		if err != nil || s == nil {
			continue
		}
		kc.add(s)
	}
	return kc
}

// dockerConfigKeychain maps a registry host to the credentials a docker config gives it.
type dockerConfigKeychain map[string]authn.AuthConfig

type dockerConfigEntry struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
}

// add reads a kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg Secret. The first Secret
// naming a host wins, as in the kubelet's keyring order.
func (kc dockerConfigKeychain) add(s *corev1.Secret) {
	var entries map[string]dockerConfigEntry
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		var cfg struct {
			Auths map[string]dockerConfigEntry `json:"auths"`
		}
		if json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg) != nil {
			return
		}
		entries = cfg.Auths
	case corev1.SecretTypeDockercfg:
		if json.Unmarshal(s.Data[corev1.DockerConfigKey], &entries) != nil {
			return
		}
	default:
		return
	}
	for host, e := range entries {
		host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://"), "/")
		if _, seen := kc[host]; seen {
			continue
		}
		if e.Username == "" && e.Auth != "" {
			if raw, err := base64.StdEncoding.DecodeString(e.Auth); err == nil {
				e.Username, e.Password, _ = strings.Cut(string(raw), ":")
			}
		}
		kc[host] = authn.AuthConfig{Username: e.Username, Password: e.Password}
	}
}

// Resolve implements authn.Keychain.
func (kc dockerConfigKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if cfg, ok := kc[res.RegistryStr()]; ok {
		return authn.FromConfig(cfg), nil
	}
	return authn.Anonymous, nil
}

// pullErrorMessage words a failed resolution as containerd does, naming the HTTP status; the
// registry's errors carry no credentials.
func pullErrorMessage(img image, err error) string {
	detail := err.Error()
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound:
			detail = fmt.Sprintf("%s: not found: manifest unknown", img.normalized)
		case http.StatusUnauthorized:
			detail = fmt.Sprintf("pulling from host %s failed with status code 401 Unauthorized: unauthorized: authentication required", reference.Domain(mustNamed(img.repo)))
		default:
			detail = fmt.Sprintf("pulling from host %s failed with status code %d %s: %v", reference.Domain(mustNamed(img.repo)), terr.StatusCode, http.StatusText(terr.StatusCode), err)
		}
	}
	return fmt.Sprintf("failed to pull and unpack image %q: failed to resolve reference %q: %s", img.normalized, img.normalized, detail)
}
