package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestWebhookFromSecret: the Tekton controller's --notify-secret takes the webhook from the
// Secret's keys url and token; a Secret missing, without url, or with a bad one is bad input
// naming the Secret, never quoting its values.
func TestWebhookFromSecret(t *testing.T) {
	secret := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "inplace-rollout-system", Name: "notify"}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	tests := []struct {
		name    string
		secret  *corev1.Secret
		wantErr string
	}{
		{"url and token", secret(map[string]string{"url": "https://hooks.example/s3cr3t", "token": "t0ken"}), ""},
		{"url only", secret(map[string]string{"url": "http://hooks.example/s3cr3t"}), ""},
		{"no such Secret", nil, "reading Secret inplace-rollout-system/notify"},
		{"no url", secret(map[string]string{"token": "t0ken"}), "Secret inplace-rollout-system/notify has no key url"},
		{"a bad url", secret(map[string]string{"url": "hooks.example/s3cr3t", "token": "t0ken"}), "key url: the webhook URL is not an absolute http or https URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kube := fake.NewClientset()
			if tt.secret != nil {
				kube = fake.NewClientset(tt.secret)
			}
			hook, err := webhookFromSecret(context.Background(), kube, "inplace-rollout-system", "notify", slog.New(slog.DiscardHandler))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := hook.Close(time.Second); err != nil {
					t.Error(err)
				}
				return
			}
			if exitCode(err) != exitBadInput || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--notify-secret") {
				t.Fatalf("webhookFromSecret: %v (exit %d); want bad input naming --notify-secret, with %q", err, exitCode(err), tt.wantErr)
			}
			for _, v := range []string{"s3cr3t", "t0ken"} {
				if strings.Contains(err.Error(), v) {
					t.Errorf("the error quotes the Secret's value %q: %v", v, err)
				}
			}
		})
	}
}
