package rollout

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func digestPod(name, image, imageID string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
		Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: image, ImageID: imageID}}},
	}
}

func TestAlreadyThere(t *testing.T) {
	const (
		d1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
		d2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	tag := map[string]string{"app": "reg.example/app:v2"}
	tests := []struct {
		name   string
		pods   []*corev1.Pod
		images map[string]string
		want   []string
		absent []string
	}{
		{"a tag run as one digest",
			[]*corev1.Pod{digestPod("a", "reg.example/app:v2", "reg.example/app@"+d1), digestPod("b", "reg.example/app:v2", "reg.example/app@"+d1)}, tag,
			[]string{"already runs these images", "app=reg.example/app:v2 as " + d1 + " (2 pods)", "does not restart them", "give the image by digest"},
			[]string{"Warning"}},
		{"a tag run as two digests",
			[]*corev1.Pod{digestPod("a", "reg.example/app:v2", "reg.example/app@"+d1), digestPod("b", "reg.example/app:v2", "docker-pullable://reg.example/app@"+d2)}, tag,
			[]string{d1 + " (1 pods) and " + d2 + " (1 pods)", "Warning: the pods run different content under one tag for container app"},
			nil},
		{"a target given by digest says nothing of tags",
			[]*corev1.Pod{digestPod("a", "reg.example/app@"+d1, "reg.example/app@"+d1)}, map[string]string{"app": "reg.example/app@" + d1},
			[]string{"already runs these images; nothing to do"},
			[]string{"tag", "Warning"}},
		{"no digest reported",
			[]*corev1.Pod{digestPod("a", "reg.example/app:v2", "")}, tag,
			[]string{"already runs these images; nothing to do"},
			[]string{"tag", "Warning"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := alreadyThere("StatefulSet shop/web", tt.pods, tt.images)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q\nlacks %q", msg, w)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(msg, a) {
					t.Errorf("%q\nhas %q", msg, a)
				}
			}
		})
	}
}
