package main

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/distribution/reference"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// FuzzImageAndBatchFlags checks --image (one flag a line of images) and --batches as run
// reads them: refused, the error is bad input (exit 2) naming the flag, the container or the
// image; accepted, every container is named as given with its image, the images are
// references, the batches pass CheckBatches, and the --image flags written back from the spec
// read the same.
func FuzzImageAndBatchFlags(f *testing.F) {
	for _, seed := range [][2]string{
		{"app=reg.example/app:v2", "1,50%,100%"},
		{"app=reg.example/app:v2\nsidecar=envoy:1.30", "100%"},
		{"app=reg.example/app:v2@sha256:" + strings.Repeat("ab", 32), ""},
		{"app=reg/app:v2\napp=reg/app:v3", "100%"},
		{"app", "100%"},
		{"=reg/app:v2", "100%"},
		{"app=", "100%"},
		{"app=Reg/App:V2", "100%"},
		{"app= reg/app:v2", "100%"},
		{"app=reg/app:v2=x", "100%"},
		{"app==", "100%"},
		{"app=reg/app:v2", "1,,100%"},
		{"app=reg/app:v2", "4294967297,100%"},
		{"app=reg/app:v2", "50%,1"},
		{"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	f.Fuzz(func(t *testing.T, images, batches string) {
		flags := strings.Split(images, "\n")
		rf := &rolloutFlags{images: flags, batches: batches}
		spec, err := rf.podsSpec(ref)
		if err != nil {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitBadInput {
				t.Fatalf("podsSpec(--image %q, --batches %q) = %T %v; want bad input", flags, batches, err, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "image") && !strings.Contains(msg, "batches") && !strings.Contains(msg, "container") {
				t.Fatalf("podsSpec(--image %q, --batches %q): error %q names no flag, container or image", flags, batches, msg)
			}
			return
		}
		if len(spec.Images) != len(flags) {
			t.Fatalf("--image %q gave %d images", flags, len(spec.Images))
		}
		for _, kv := range flags {
			name, img, _ := strings.Cut(kv, "=")
			if spec.Images[name] != img {
				t.Fatalf("--image %q: container %q has %q", kv, name, spec.Images[name])
			}
			if _, err := reference.ParseNormalizedNamed(img); err != nil {
				t.Fatalf("--image %q accepted an image that is not a reference: %v", kv, err)
			}
		}
		if err := rollout.CheckBatches(spec.Batches); err != nil {
			t.Fatalf("--batches %q accepted, but CheckBatches refuses it: %v", batches, err)
		}
		var back []string
		for name, img := range spec.Images {
			back = append(back, name+"="+img)
		}
		again, err := parseImages(back)
		if err != nil || !maps.Equal(again, spec.Images) {
			t.Fatalf("--image %q written back as %q reads %v, %v", flags, back, again, err)
		}
	})
}
