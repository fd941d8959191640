package controller_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/notify"
	"github.com/inplace-rollout/inplace-rollout/test/integration/clitest"
	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

var (
	env *cluster.Cluster
	// cli is the inplace-rollout binary built for these tests; it runs as the controller.
	cli string
	// controller is the InPlaceRollout controller, a process authenticated as
	// config/controller's ServiceAccount, bound only to its roles.
	controller *cluster.OwnController
	// hook receives the controller's notifications.
	hook = &receiver{}
)

// notifySecret is the Secret, in the controller's namespace, naming the webhook.
const notifySecret = "inplace-rollout-notify"

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the control plane with the audit log, a webhook receiver and the controller, runs
// the tests and, when every test ran and passed, checks config/controller's roles against the
// calls the controller made; then it stops them all.
func run(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "inplace-rollout-controller-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if cli, err = clitest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err = cluster.Start(ctx, cluster.Options{AuditLog: true, Prometheus: true, AuditUsers: []string{cluster.InplaceControllerUser}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the local control plane: %v\n", err)
		return 1
	}
	defer func() {
		if p := os.Getenv("INPLACE_ROLLOUT_CONTROLLER_LOG"); p != "" && env.InplaceController != nil {
			if data, err := os.ReadFile(env.InplaceController.LogPath); err == nil {
				_ = os.WriteFile(p, data, 0o644)
			}
		}
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the local control plane: %v\n", err)
		}
	}()
	server := httptest.NewServer(hook)
	defer server.Close()
	if err := env.InstallInplaceController(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "installing config/controller: %v\n", err)
		return 1
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: notifySecret, Namespace: cluster.InplaceTektonNamespace},
		StringData: map[string]string{"url": server.URL + "/hooks/s3cr3t-path", "token": "t0ken-9f2e"}}
	if _, err := env.Client.CoreV1().Secrets(cluster.InplaceTektonNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "creating the webhook's Secret: %v\n", err)
		return 1
	}
	if controller, err = env.StartInplaceController(ctx, cli, "--notify-secret", notifySecret); err != nil {
		fmt.Fprintf(os.Stderr, "starting inplace-rollout controller: %v\n", err)
		return 1
	}
	code := m.Run()
	if code != 0 {
		return code
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		fmt.Fprintln(os.Stderr, "the RBAC check of config/controller's roles runs only when every test runs (no -run)")
		return code
	}
	calls, err := controller.CheckRBAC(needs())
	if err != nil {
		fmt.Fprintf(os.Stderr, "RBAC check of config/controller's roles against the calls the controller made:\n%v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "RBAC check: config/controller's roles grant exactly the calls the controller made:\n  %s\n", strings.Join(calls, "\n  "))
	return code
}

// receiver is the webhook: it keeps every notification it is sent, as kind (the CloudEvent's
// type without its prefix) and data, and checks the bearer token.
type receiver struct {
	mu   sync.Mutex
	got  []received
	errs []string
}

type received struct {
	kind string
	data notify.Data
}

func (h *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Type string      `json:"type"`
		Data notify.Data `json:"data"`
	}
	err := json.NewDecoder(r.Body).Decode(&ev)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil:
		h.errs = append(h.errs, "not a CloudEvents JSON document: "+err.Error())
	case r.Header.Get("Authorization") != "Bearer t0ken-9f2e" || r.URL.Path != "/hooks/s3cr3t-path":
		h.errs = append(h.errs, fmt.Sprintf("posted to %s with Authorization %q", r.URL.Path, r.Header.Get("Authorization")))
	default:
		h.got = append(h.got, received{kind: strings.TrimPrefix(ev.Type, notify.EventTypePrefix), data: ev.Data})
	}
}

// waitKinds waits until the notifications about workloads in namespace ns are want, in order
// (deliveries are asynchronous), and fails the test with what came when they are not within a
// while, or when more came.
func (h *receiver) waitKinds(t *testing.T, ns string, want ...string) {
	t.Helper()
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = h.kinds(t, ns)
		if len(got) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the webhook heard %q about namespace %s, want %q", got, ns, want)
	}
}

// kinds are the kinds of the notifications about workloads in namespace ns, in order.
func (h *receiver) kinds(t *testing.T, ns string) []string {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.errs {
		t.Errorf("webhook: %s", e)
	}
	var out []string
	for _, r := range h.got {
		if r.data.Target.Namespace == ns {
			out = append(out, r.kind)
		}
	}
	return out
}
