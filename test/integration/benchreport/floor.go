package benchreport

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// FloorSpec says what the floor loop patches.
type FloorSpec struct {
	Namespace string
	// App selects the pods by their label app.
	App string
	// Container is the container whose image changes, Image its new image.
	Container, Image string
	// Batches are the cumulative pod counts after each batch, as inplace-rollout's --batches.
	Batches []int
}

// floorWorkers is how many patches the floor loop has in flight: enough that the client's
// rate limit, not the loop, bounds it.
const floorWorkers = 32

// Floor is the least any in-place rollout does: for each batch, patch the image of its pods,
// then wait until they are Ready on it. No lock, no state, no checks, no retries: what it
// costs is the machine's and the control plane's share of the rollout, against which
// inplace-rollout's own overhead is measured.
func Floor(ctx context.Context, client kubernetes.Interface, spec FloorSpec) error {
	w, err := watchPods(ctx, client, spec.Namespace)
	if err != nil {
		return err
	}
	pods := w.pods(spec.App)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	if n := len(pods); len(spec.Batches) == 0 || spec.Batches[len(spec.Batches)-1] != n {
		return fmt.Errorf("floor: the batches %v do not end at the %d pods app=%s of namespace %s", spec.Batches, n, spec.App, spec.Namespace)
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": []map[string]string{{"name": spec.Container, "image": spec.Image}}}})
	if err != nil {
		return fmt.Errorf("floor: encoding the patch: %w", err)
	}
	done := 0
	for _, upto := range spec.Batches {
		batch := pods[done:upto]
		names := make(chan string)
		errs := make(chan error, len(batch))
		var wg sync.WaitGroup
		for range min(floorWorkers, len(batch)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for name := range names {
					if _, err := client.CoreV1().Pods(spec.Namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
						errs <- fmt.Errorf("floor: patching pod %s/%s: %w", spec.Namespace, name, err)
					}
				}
			}()
		}
		for _, p := range batch {
			names <- p.Name
		}
		close(names)
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		tick := time.NewTicker(20 * time.Millisecond)
		for !batchReady(w, batch, spec.Image) {
			select {
			case <-ctx.Done():
				tick.Stop()
				return fmt.Errorf("floor: waiting for pods %s..%s to be Ready on %s: %w", batch[0].Name, batch[len(batch)-1].Name, spec.Image, ctx.Err())
			case <-tick.C:
			}
		}
		tick.Stop()
		done = upto
	}
	return nil
}

func batchReady(w *podWatch, batch []*corev1.Pod, image string) bool {
	for _, p := range batch {
		cur, err := w.lister.Pods(p.Namespace).Get(p.Name)
		if err != nil || !readyOn(cur, image) {
			return false
		}
	}
	return true
}
