package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"

	"github.com/inplace-rollout/inplace-rollout/pkg/inplace"
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

// FuzzResourceFlags checks --requests and --limits (one flag a line each) as run reads them:
// refused, the error is bad input (exit 2) naming the flag; accepted, every container has the
// values given, only cpu and memory, none below zero, each limit at or above its request, and
// the values written back as flags read the same.
func FuzzResourceFlags(f *testing.F) {
	for _, seed := range [][2]string{
		{"app=cpu=200m,memory=64Mi", "app=cpu=400m"},
		{"app=cpu=200m\nside=memory=32Mi", ""},
		{"", "app=memory=1Gi"},
		{"=cpu=1", ""},
		{"app", ""},
		{"app=", ""},
		{"app=cpu", ""},
		{"app=cpu=", ""},
		{"app=cpu=lots", ""},
		{"app=cpu=-1", ""},
		{"app=cpu=1,cpu=2", ""},
		{"app=gpu=1", ""},
		{"app=cpu=2", "app=cpu=1"},
		{"app=cpu=1\napp=memory=1Gi", ""},
		{"app=memory=1e3", "app=memory=0.5Ki"},
	} {
		f.Add(seed[0], seed[1])
	}
	lines := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	f.Fuzz(func(t *testing.T, requests, limits string) {
		rf := &rolloutFlags{images: []string{"app=reg/app:v2"}, requests: lines(requests), limits: lines(limits), batches: "100%"}
		spec, err := rf.podsSpec(ref)
		if err != nil {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitBadInput {
				t.Fatalf("podsSpec(--requests %q, --limits %q) = %T %v; want bad input", rf.requests, rf.limits, err, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "--requests") && !strings.Contains(msg, "--limits") && !strings.Contains(msg, "resources of container") {
				t.Fatalf("podsSpec(--requests %q, --limits %q): error %q names no flag or container", rf.requests, rf.limits, msg)
			}
			return
		}
		if n := len(rf.requests) + len(rf.limits); n > 0 && len(spec.Resources) == 0 {
			t.Fatalf("--requests %q --limits %q gave no resources", rf.requests, rf.limits)
		}
		if err := inplace.CheckResourceValues(spec.Resources); err != nil {
			t.Fatalf("--requests %q --limits %q accepted, but CheckResourceValues refuses them: %v", rf.requests, rf.limits, err)
		}
		var back rolloutFlags
		for name, r := range spec.Resources {
			for _, part := range []struct {
				list corev1.ResourceList
				to   *[]string
			}{{r.Requests, &back.requests}, {r.Limits, &back.limits}} {
				var vals []string
				for res, q := range part.list {
					vals = append(vals, fmt.Sprintf("%s=%s", res, q.String()))
				}
				if len(vals) > 0 {
					*part.to = append(*part.to, name+"="+strings.Join(vals, ","))
				}
			}
		}
		again, err := back.resources()
		if err != nil || len(again) != len(spec.Resources) {
			t.Fatalf("resources %v written back as --requests %q --limits %q read %v, %v", spec.Resources, back.requests, back.limits, again, err)
		}
		for name, r := range spec.Resources {
			a := again[name]
			if len(a.Requests) != len(r.Requests) || len(a.Limits) != len(r.Limits) || !inplace.HasResources(a, r) {
				t.Fatalf("container %q: %v written back reads %v", name, r, a)
			}
		}
	})
}

// FuzzHooksFlag checks --hooks as run reads it: refused, the error is bad input (exit 2) naming
// the flag; accepted, the hooks pass the engine's check, each configured hook is described in
// one line, and the field written back as JSON reads as the same hooks.
func FuzzHooksFlag(f *testing.F) {
	for _, seed := range []string{
		"{preUpdate: {http: {port: 8080, path: /hook/pre, method: POST}, timeout: 10s}}",
		"{postUpdate: {handshake: {condition: example.com/registered}, onFailure: Continue}}",
		`{"preUpdate": {"http": {"port": "http", "path": "/h", "expectStatus": 204}}, "postUpdate": {"http": {"port": 1, "path": "/"}}}`,
		"{preUpdate: {http: {port: 8080, path: /h}, handshake: {condition: x}}}",
		"{preUpdate: {}}",
		"{preUpdate: {http: {port: 70000, path: /h}}}",
		"{preUpdate: {http: {port: '8080', path: /h}}}",
		"{preUpdate: {http: {port: 8080, path: h}}}",
		"{preUpdate: {http: {port: 8080, path: '/h?q'}}}",
		"{preUpdate: {handshake: {condition: Ready}}}",
		"{preUpdate: {handshake: {condition: x}, timeout: -1s, onFailure: Retry}}",
		"{preUpdate: {exec: {}}}",
		"{}",
		"[",
	} {
		f.Add(seed)
	}
	ref := workload.Ref{Kind: workload.StatefulSet, Namespace: "ns", Name: "web"}
	f.Fuzz(func(t *testing.T, text string) {
		rf := &rolloutFlags{images: []string{"app=reg/app:v2"}, hooksText: text, batches: "100%"}
		spec, err := rf.podsSpec(ref)
		if err != nil {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitBadInput {
				t.Fatalf("podsSpec(--hooks %q) = %T %v; want bad input", text, err, err)
			}
			if !strings.Contains(err.Error(), "--hooks") {
				t.Fatalf("podsSpec(--hooks %q): error %q names no flag", text, err)
			}
			return
		}
		if err := inplace.CheckHooks("hooks", spec.Hooks); err != nil {
			t.Fatalf("--hooks %q accepted, but CheckHooks refuses it: %v", text, err)
		}
		configured := 0
		if spec.Hooks != nil {
			for _, h := range []*inplace.Hook{spec.Hooks.PreUpdate, spec.Hooks.PostUpdate} {
				if h != nil {
					configured++
				}
			}
		}
		if lines := inplace.DescribeHooks(spec.Hooks); len(lines) != configured {
			t.Fatalf("--hooks %q: %d hooks described as %q", text, configured, lines)
		}
		doc, _, _ := rf.hooks()
		if doc == nil {
			if spec.Hooks != nil {
				t.Fatalf("--hooks %q gave hooks %+v from no field", text, spec.Hooks)
			}
			return
		}
		back, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, again, err := (&rolloutFlags{hooksText: string(back)}).hooks()
		if err != nil || !reflect.DeepEqual(again, spec.Hooks) {
			t.Fatalf("--hooks %q written back as %s reads %+v, %v; want %+v", text, back, again, err, spec.Hooks)
		}
	})
}
