package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/analysis"
)

// maxClients bounds the Prometheus clients an Engine keeps: one per configuration in use, and a
// driver serves a bounded number of rollouts at once.
const maxClients = 64

// querier returns the Prometheus client for the spec's analysis: one per configuration
// (address, headers, TLS, credentials), built on first use and shared by every rollout and
// goroutine that uses the same one, so that no rollout ever queries with another's address or
// credentials. Secret-referenced credentials are read from the rollout's namespace on every
// call, so a rotated Secret takes effect at the next step.
func (e *Engine) querier(ctx context.Context, spec Spec) (analysis.Querier, error) {
	if e.Querier != nil {
		return e.Querier, nil
	}
	p := spec.Analysis.Prometheus
	creds, err := e.credentials(ctx, spec.Target.Namespace, p)
	if err != nil {
		return nil, err
	}
	key := clientKey(p, spec.PrometheusURL, creds)
	e.mu.Lock()
	defer e.mu.Unlock()
	if c, ok := e.clients[key]; ok {
		return c, nil
	}
	c, err := analysis.NewClientWith(p, spec.PrometheusURL, creds)
	if err != nil {
		return nil, &InvalidError{Msg: err.Error()}
	}
	if e.clients == nil {
		e.clients = map[string]*analysis.Client{}
	}
	if len(e.clientOrder) >= maxClients {
		delete(e.clients, e.clientOrder[0])
		e.clientOrder = e.clientOrder[1:]
	}
	e.clients[key] = c
	e.clientOrder = append(e.clientOrder, key)
	return c, nil
}

// credentials reads the Secret keys the configuration names, from the rollout's namespace.
func (e *Engine) credentials(ctx context.Context, namespace string, p analysis.Prometheus) (analysis.Credentials, error) {
	var creds analysis.Credentials
	refs := p.SecretRefs()
	for _, path := range slices.Sorted(maps.Keys(refs)) {
		ref := refs[path]
		secret, err := e.Client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return creds, invalid("analysis %s: Secret %s/%s not found", path, namespace, ref.Name)
		case err != nil:
			return creds, fmt.Errorf("reading Secret %s/%s for analysis %s: %w", namespace, ref.Name, path, err)
		}
		value, ok := secret.Data[ref.Key]
		if !ok {
			return creds, invalid("analysis %s: Secret %s/%s has no key %q", path, namespace, ref.Name, ref.Key)
		}
		switch path {
		case "prometheus.bearerTokenSecret":
			creds.BearerToken = string(value)
		case "prometheus.basicAuth.passwordSecret":
			creds.Password = string(value)
		case "prometheus.tls.caSecret":
			creds.CA = string(value)
		}
	}
	return creds, nil
}

// clientKey identifies a client configuration without keeping its credentials: a hash of the
// configuration, the address that overrides it, and the credentials read for it.
func clientKey(p analysis.Prometheus, address string, creds analysis.Credentials) string {
	h := sha256.New()
	cfg, _ := json.Marshal(p)
	h.Write(cfg)
	for _, s := range []string{address, creds.BearerToken, creds.Password, creds.CA} {
		fmt.Fprintf(h, "\x00%d:%s", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}
