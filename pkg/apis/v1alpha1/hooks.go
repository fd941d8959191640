package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Hooks run around each pod's change, and around its revert by a rollback: a registry outside
// Kubernetes (service discovery, a load balancer's pool) learns from them when to stop and start
// sending the pod traffic.
type Hooks struct {
	// PreUpdate runs before a pod is drained and changed.
	PreUpdate *Hook `json:"preUpdate,omitempty"`
	// PostUpdate runs once a pod is Ready on its new images, before it counts as updated.
	PostUpdate *Hook `json:"postUpdate,omitempty"`
}

// Hook is exactly one of an HTTP call to the pod and a handshake on a pod condition, with how
// long it may take and what its failure does. A hook runs at most once per pod and direction.
type Hook struct {
	// HTTP is a request to a port of the pod, sent through the API server's pod proxy: the
	// driver needs get (GET) or create (POST) on pods/proxy.
	HTTP *HTTPHook `json:"http,omitempty"`
	// Handshake sets a pod condition False and waits for another party to set it True: the
	// driver needs patch on pods/status.
	Handshake *HandshakeHook `json:"handshake,omitempty"`
	// Timeout bounds the call, or the wait for the handshake [http 10s, handshake 5m].
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// OnFailure is what a failed, timed-out or interrupted hook does: Fail (the pod fails and
	// its batch rolls back) or Continue (the failure is recorded and the pod goes on) [Fail].
	OnFailure string `json:"onFailure,omitempty"`
}

// HTTPHook is a request to a port of the pod, as an HTTP probe's.
type HTTPHook struct {
	// Port is a container port of the pod: a number, or the name of a port a container of the
	// pod template declares.
	Port intstr.IntOrString `json:"port"`
	// Path is the request's path, starting with /, without a query.
	Path string `json:"path"`
	// Method is GET or POST [GET].
	Method string `json:"method,omitempty"`
	// ExpectStatus is the status code that passes; absent, any code from 200 to 399 passes, as
	// for a probe.
	ExpectStatus int32 `json:"expectStatus,omitempty"`
}

// HandshakeHook names the pod condition of a handshake.
type HandshakeHook struct {
	// Condition is the type of the pod condition the rollout sets False and another party
	// (a registry's controller) sets True: one of your own, not one that Kubernetes or the
	// rollout writes.
	Condition string `json:"condition"`
}
