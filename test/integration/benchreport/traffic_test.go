package benchreport

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

func TestOutTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	in := func(s float64) edge { return edge{at: at(s), in: true} }
	out := func(s float64) edge { return edge{at: at(s), in: false} }
	t1 := at(10)
	tests := []struct {
		name   string
		edges  map[string][]edge
		paired bool
		want   []time.Duration
	}{
		{"in throughout", map[string][]edge{"a": {in(-5)}}, false, []time.Duration{0}},
		{"out and back, twice", map[string][]edge{"a": {in(-5), out(1), in(3), out(4), in(4.5)}}, false, []time.Duration{sec(2.5)}},
		{"still out at the end", map[string][]edge{"a": {in(-5), out(8)}}, false, []time.Duration{sec(2)}},
		{"turns after the end are left out", map[string][]edge{"a": {in(-5), out(9), in(12)}}, false, []time.Duration{sec(1)}},
		{"a turn at the start itself counts", map[string][]edge{"a": {in(-5), out(0), in(1)}}, false, []time.Duration{sec(1)}},
		{"pods not in at the start are not counted", map[string][]edge{"a": {in(-5), out(1), in(2)}, "b": {in(1)}, "c": {in(-2), out(-1)}}, false, []time.Duration{sec(1)}},
		{
			"recreated under the same name", map[string][]edge{"web-0": {in(-5), out(1), in(3)}, "web-1": {in(-5), out(2), in(6)}},
			false, []time.Duration{sec(2), sec(4)},
		},
		{
			"paired: each leaving pod with the next new one in order",
			map[string][]edge{
				"old-a": {in(-5), out(1)}, "old-b": {in(-5), out(2)}, "old-c": {in(-5)},
				"new-x": {in(4)}, "new-y": {in(2.5)},
			},
			true, []time.Duration{0, sec(1.5), sec(2)},
		},
		{
			"paired: a leaving pod with no new one counts until the end",
			map[string][]edge{"old-a": {in(-5), out(1)}, "old-b": {in(-5), out(2)}, "new-x": {in(0.5)}},
			true, []time.Duration{0, sec(8)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outTimes(tt.edges, t0, t1, tt.paired); !slices.Equal(got, tt.want) {
				t.Errorf("outTimes = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPresenceRecordsTurnsOnly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPresence()
	p.set("a", "web", false, t0) // never seen: already out
	p.set("a", "web", true, t0.Add(time.Second))
	p.set("a", "web", true, t0.Add(2*time.Second))
	p.set("a", "web", false, t0.Add(3*time.Second))
	p.set("b", "other", true, t0)
	want := []edge{{at: t0.Add(time.Second), in: true}, {at: t0.Add(3 * time.Second), in: false}}
	if got := p.edges["a"]; !slices.Equal(got, want) {
		t.Errorf("edges of a = %v, want %v", got, want)
	}
	if got := p.outTimes("web", t0.Add(2*time.Second), t0.Add(5*time.Second), false); !slices.Equal(got, []time.Duration{2 * time.Second}) {
		t.Errorf("outTimes of app web = %v, want [2s]", got)
	}
}

func TestQuantilesOf(t *testing.T) {
	ds := make([]time.Duration, 200)
	for i := range ds {
		ds[i] = time.Duration(200-i) * time.Millisecond // unsorted
	}
	want := Quantiles{P50: 100 * time.Millisecond, P99: 198 * time.Millisecond, Max: 200 * time.Millisecond}
	if got := quantilesOf(ds); got != want {
		t.Errorf("quantilesOf(1..200 ms) = %+v, want %+v", got, want)
	}
	if got := quantilesOf([]time.Duration{time.Second}); got != (Quantiles{time.Second, time.Second, time.Second}) {
		t.Errorf("quantilesOf one = %+v", got)
	}
	if got := quantilesOf(nil); got != (Quantiles{}) {
		t.Errorf("quantilesOf none = %+v", got)
	}
}

// slice is an EndpointSlice of Service svc listing pods, each ready or not.
func slice(name, svc string, ready map[string]bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for _, pod := range slices.Sorted(func(yield func(string) bool) {
		for p := range ready {
			if !yield(p) {
				return
			}
		}
	}) {
		r := ready[pod]
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.100.0.2"},
			Conditions: discoveryv1.EndpointConditions{Ready: &r},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID("uid-" + pod)}})
	}
	return s
}

// TestEndpointsFollowTheServicesSlices: the pods listed ready are the union over the Service's
// slices; a pod turns out when no slice lists it ready, and another Service's slices do not
// count.
func TestEndpointsFollowTheServicesSlices(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	e := &endpoints{lister: discoverylisters.NewEndpointSliceLister(idx), listed: newPresence(), ready: map[string]map[string]types.UID{}}
	apply := func(s *discoveryv1.EndpointSlice) {
		t.Helper()
		if err := idx.Update(s); err != nil {
			t.Fatal(err)
		}
		e.sync(s)
	}
	apply(slice("web-1", "web", map[string]bool{"web-0": true, "web-1": true}))
	apply(slice("web-2", "web", map[string]bool{"web-2": true}))
	apply(slice("other-1", "other", map[string]bool{"x-0": true}))
	if got, want := e.targets("web"), []types.UID{"uid-web-0", "uid-web-1", "uid-web-2"}; !slices.Equal(got, want) {
		t.Fatalf("targets = %v, want %v", got, want)
	}
	apply(slice("web-1", "web", map[string]bool{"web-0": true, "web-1": false}))
	if err := idx.Delete(slice("web-2", "web", nil)); err != nil {
		t.Fatal(err)
	}
	e.sync(cache.DeletedFinalStateUnknown{Key: "bench/web-2", Obj: slice("web-2", "web", nil)})
	if got, want := e.targets("web"), []types.UID{"uid-web-0"}; !slices.Equal(got, want) {
		t.Errorf("targets after web-1 turned unready and web-2's slice went = %v, want %v", got, want)
	}
	for pod, want := range map[string][]bool{"web-0": {true}, "web-1": {true, false}, "web-2": {true, false}, "x-0": {true}} {
		var got []bool
		for _, ed := range e.listed.edges[pod] {
			got = append(got, ed.in)
		}
		if !slices.Equal(got, want) {
			t.Errorf("turns of %s = %v, want %v", pod, got, want)
		}
	}
	if e.listed.app["x-0"] != "other" {
		t.Errorf("x-0 recorded for %q, want other", e.listed.app["x-0"])
	}
}

// TestLoadCountsRequestsToPodsNotServing: a request fails when it reaches a pod that does not
// serve, or finds no pod listed.
func TestLoadCountsRequestsToPodsNotServing(t *testing.T) {
	e := &endpoints{listed: newPresence(), ready: map[string]map[string]types.UID{
		"web": {"web-0": "uid-web-0", "web-1": "uid-web-1"},
	}}
	tests := []struct {
		name    string
		app     string
		serving func(types.UID) bool
		// failedAll: every request fails; else none does.
		failedAll bool
	}{
		{"every pod serving", "web", func(types.UID) bool { return true }, false},
		{"no pod serving", "web", func(types.UID) bool { return false }, true},
		{"no pod listed", "empty", func(types.UID) bool { return true }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := e.startLoad(context.Background(), tt.app, tt.serving)
			for {
				time.Sleep(loadTick)
				if sent, _ := l.snapshot(); sent > 0 {
					break
				}
			}
			sent, failed := l.stop()
			if tt.failedAll && failed != sent || !tt.failedAll && failed != 0 {
				t.Errorf("sent %d, failed %d; want every request failed: %v", sent, failed, tt.failedAll)
			}
		})
	}
}
