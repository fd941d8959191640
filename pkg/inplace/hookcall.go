package inplace

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// HookCaller makes HTTP hook calls to pods.
type HookCaller interface {
	// Call sends the request of c to the pod and returns the status code it answered, or why
	// there was none. It never returns a response body: a hook's answer goes into the pod's
	// state and Events, which must not carry what an application put there.
	Call(ctx context.Context, pod *corev1.Pod, c HookCall) HookResult
}

// PodProxy calls hooks through the API server's pod proxy (pods/proxy: get for GET, create for
// POST), the way `kubectl get --raw /api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH` does. The
// driver needs no route to the pod network, and the call takes the driver's RBAC.
type PodProxy struct {
	Client kubernetes.Interface
}

// Call implements HookCaller.
func (p PodProxy) Call(ctx context.Context, pod *corev1.Pod, c HookCall) HookResult {
	res := p.Client.CoreV1().RESTClient().Verb(c.HTTP.method()).
		Namespace(pod.Namespace).Resource("pods").SubResource("proxy").
		Name(pod.Name + ":" + strconv.Itoa(int(c.Port))).Suffix(c.HTTP.Path).
		Do(ctx)
	var code int
	res.StatusCode(&code)
	switch {
	case code == 0 && errors.Is(res.Error(), context.DeadlineExceeded):
		return HookResult{Err: fmt.Sprintf("no answer within %s", c.Timeout)}
	case code == 0:
		return HookResult{Err: fmt.Sprintf("no answer through the API server's pod proxy: %v", res.Error())}
	}
	return HookResult{Status: code}
}
