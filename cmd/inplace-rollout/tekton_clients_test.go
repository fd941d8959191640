package main

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestTektonClientsShareOneLimit: the controller's Kubernetes and Tekton clients take their
// tokens from one bucket, at --kube-api-qps and --kube-api-burst; the Lease's client has its own.
func TestTektonClientsShareOneLimit(t *testing.T) {
	c, err := newTektonClients(&rest.Config{Host: "https://127.0.0.1:6443"}, 7, 9)
	if err != nil {
		t.Fatal(err)
	}
	kube := c.kube.(*kubernetes.Clientset).CoreV1().RESTClient().GetRateLimiter()
	tekton := c.tekton.TektonV1beta1().RESTClient().GetRateLimiter()
	lease := c.lease.(*kubernetes.Clientset).CoordinationV1().RESTClient().GetRateLimiter()
	switch {
	case kube == nil || kube != tekton:
		t.Errorf("Kubernetes client limiter %p, Tekton client limiter %p: want one, shared", kube, tekton)
	case kube.QPS() != 7:
		t.Errorf("shared limiter at %v requests/s, want 7", kube.QPS())
	case lease == kube:
		t.Error("the Lease client shares the controller's limiter: want one of its own")
	}
}
