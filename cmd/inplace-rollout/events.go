package main

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// Event components: the ReportingController of each driver's Events is inplace-rollout.io/ and
// its component.
const (
	cliComponent         = "inplace-rollout"
	argoStepComponent    = "argo-step"
	argoTrafficComponent = "argo-traffic"
	tektonComponent      = "tekton-controller"
)

// serveEventDrain bounds how long a process that serves (a plugin, the Tekton controller) waits
// for its last Events as it stops: a pod being stopped has a grace period to share.
const serveEventDrain = 5 * time.Second

// processEvents is the Event broadcaster of a process that serves until it is stopped: made
// with its first engine, once, and closed as the process ends.
type processEvents struct {
	mu sync.Mutex
	b  *rollout.EventBroadcaster
}

// recorder records the Events of component through client, with the broadcaster made by the
// first call. Failed writes are logged on log.
func (p *processEvents) recorder(client kubernetes.Interface, component string, log *slog.Logger) (rollout.EventRecorder, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b == nil {
		b, err := rollout.NewEventBroadcaster(client, func(err error) { log.Warn("event not recorded", "err", err) })
		if err != nil {
			return nil, fmt.Errorf("recording Events: %w", err)
		}
		p.b = b
	}
	return p.b.Recorder(component), nil
}

// close records the Events still queued, for up to serveEventDrain, and stops the broadcaster.
func (p *processEvents) close(log *slog.Logger) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b == nil {
		return
	}
	if err := p.b.Close(serveEventDrain); err != nil {
		log.Warn("events lost", "err", err)
	}
}
