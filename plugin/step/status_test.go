package step

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"

	"github.com/inplace-rollout/inplace-rollout/plugin/plugintest"
)

// The step's status is the same size for 5 pods or 5,000, analysis included: no pod list, no
// measurement, only counts and the last verdict.
func TestStepStatusSize(t *testing.T) {
	status := func(pods int) rollout.Status {
		names := make([]string, pods)
		for i := range names {
			names[i] = fmt.Sprintf("web-%d", i)
		}
		value := 0.01
		return rollout.Status{RolloutID: "ae183ad3ee-1772366400", Phase: rollout.PhaseProgressing, Batch: 2, Batches: 3,
			Total: pods, Updated: pods / 2, Updating: pods / 10, Reason: rollout.ReasonSuperseded,
			Message: "batch 2/3: waiting for " + strings.Join(names, ", "),
			Analysis: &analysis.Run{Batch: 2, Pods: pods / 2, Verdict: analysis.Pass, Reason: "every check passed", Queries: pods,
				Last: []analysis.Measurement{{Results: []analysis.CheckResult{{Check: "errorRate", Verdict: analysis.Pass, Value: &value,
					Query: `sum(rate(http_requests_total{pod=~"` + strings.Join(names, "|") + `"}[1m]))`}}}}}}
	}
	small, large := stepStatus(status(5)), stepStatus(status(5000))
	// The counts take more digits, and nothing else grows: 3 counts of 1 to 4 digits.
	if len(large) > len(small)+3*3 {
		t.Errorf("status of 5,000 pods is %d bytes, of 5 pods %d: it grows with the pods:\n%s", len(large), len(small), large)
	}
	var st StepStatus
	if err := json.Unmarshal(large, &st); err != nil {
		t.Fatal(err)
	}
	if st.Verdict == nil || *st.Verdict != (Verdict{Batch: 2, Phase: "Successful"}) {
		t.Errorf("verdict %+v, want batch 2 Successful", st.Verdict)
	}
}

func TestVerdictOf(t *testing.T) {
	tests := []struct {
		run  *analysis.Run
		want *Verdict
	}{
		{nil, nil},
		{&analysis.Run{Batch: 1}, &Verdict{Batch: 1, Phase: "Running"}},
		{&analysis.Run{Batch: 2, Verdict: analysis.Pass}, &Verdict{Batch: 2, Phase: "Successful"}},
		{&analysis.Run{Batch: 3, Verdict: analysis.Fail}, &Verdict{Batch: 3, Phase: "Failed"}},
		{&analysis.Run{Batch: 1, Verdict: analysis.Inconclusive}, &Verdict{Batch: 1, Phase: "Inconclusive"}},
		{&analysis.Run{Batch: 1, Verdict: analysis.Error}, &Verdict{Batch: 1, Phase: "Error"}},
	}
	for _, tt := range tests {
		got := verdictOf(tt.run)
		if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("verdictOf(%+v) = %+v, want %+v", tt.run, got, tt.want)
		}
	}
}

// upQuerier answers every query with 1: every check of upAnalysis passes.
type upQuerier struct{}

func (upQuerier) Query(context.Context, string) (float64, bool, error) { return 1, true, nil }

// upAnalysis is an analysis of one measurement per batch that passes on upQuerier.
const upAnalysis = `"analysis":{"prometheus":{"address":"http://prom.example:9090"},"count":1,"interval":"1s","initialDelay":"0s",` +
	`"checks":{"errorRate":{"disabled":true},"latency":{"disabled":true},"traffic":{"disabled":true},"saturation":{"disabled":true},` +
	`"custom":[{"name":"up","query":"min(up)","condition":"result > 0"}]}}`

// A step whose batches pass their analysis ends with the last batch's verdict in its status.
func TestRunStatusCarriesVerdict(t *testing.T) {
	client := newClient(t, 2)
	playKubelet(t, client)
	p := newPluginWith(t, Clients{Driver: &rollout.Driver{Engine: &rollout.Engine{Client: client, Querier: upQuerier{}}}}, Options{})
	res := runToEnd(t, p, argoRollout("65f9bfd99b"), withField(goodConfig, `"batches":[1,"100%"],`+upAnalysis))
	if res.Phase != types.PhaseSuccessful {
		t.Fatalf("Run = %s %q, want Successful", res.Phase, res.Message)
	}
	var st StepStatus
	if err := json.Unmarshal(res.Status, &st); err != nil {
		t.Fatal(err)
	}
	if st.Verdict == nil || *st.Verdict != (Verdict{Batch: 2, Phase: "Successful"}) {
		t.Errorf("status %s, want the verdict of batch 2, Successful", res.Status)
	}
}

// restartsOf is each pod's restart count, by name: one per in-place image change.
func restartsOf(t *testing.T, client *fake.Clientset) map[string]int32 {
	t.Helper()
	pods, err := client.CoreV1().Pods(testNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, p := range pods.Items {
		out[p.Name] = p.Status.ContainerStatuses[0].RestartCount
	}
	return out
}

// A later step of the same Rollout with the same images continues from the hold of an earlier
// one (upTo 34%, then no upTo): one rollout, every pod updated once.
func TestLaterStepContinuesFromHold(t *testing.T) {
	client := newClient(t, 3)
	playKubelet(t, client)
	p := newPlugin(t, client, 0)
	res := runToEnd(t, p, argoRollout("65f9bfd99b"), withField(goodConfig, `"upTo":"34%"`))
	var held StepStatus
	if err := json.Unmarshal(res.Status, &held); err != nil {
		t.Fatal(err)
	}
	if res.Phase != types.PhaseSuccessful || held.Phase != rollout.PhaseHolding || held.Updated == 0 || held.Updated >= 3 {
		t.Fatalf("the upTo step = %s %s; want Successful, holding part way", res.Phase, res.Status)
	}
	res = runToEnd(t, p, argoRollout("65f9bfd99b"), goodConfig)
	var done StepStatus
	if err := json.Unmarshal(res.Status, &done); err != nil {
		t.Fatal(err)
	}
	if res.Phase != types.PhaseSuccessful || done.Phase != rollout.PhaseSucceeded || done.Updated != 3 {
		t.Fatalf("the last step = %s %s; want Successful, all 3 updated", res.Phase, res.Status)
	}
	if done.RolloutID != held.RolloutID {
		t.Errorf("the last step ran rollout %s, want the held one, %s, continued", done.RolloutID, held.RolloutID)
	}
	for name, n := range restartsOf(t, client) {
		if n != 1 {
			t.Errorf("pod %s restarted %d times, want once", name, n)
		}
	}
	if l := lockOf(t, client); l.Phase != rollout.PhaseSucceeded {
		t.Errorf("lock %s, want Succeeded", l.Phase)
	}
}

// A template change mid-rollout (Argo runs the first step again with a new config and no Abort)
// supersedes: the newest images win, each pod restarts once per image it gets, and the pods keep
// the last stable image as the one an Abort returns them to.
func TestTemplateChangeSupersedes(t *testing.T) {
	const imageV3 = "reg.example/app:v3"
	client := newClient(t, 3)
	playKubelet(t, client)
	p := newPlugin(t, client, 0)
	ro := argoRollout("65f9bfd99b")
	if res := runToEnd(t, p, ro, withField(goodConfig, `"upTo":1`)); res.Phase != types.PhaseSuccessful {
		t.Fatalf("the v2 step = %s %q, want Successful at its hold", res.Phase, res.Message)
	}
	ro.Status.CurrentPodHash = "58fc86859"
	v3 := strings.Replace(goodConfig, imageV2, imageV3, 1)
	res := runToEnd(t, p, ro, v3)
	var st StepStatus
	if err := json.Unmarshal(res.Status, &st); err != nil {
		t.Fatal(err)
	}
	if res.Phase != types.PhaseSuccessful || st.Phase != rollout.PhaseSucceeded || st.Updated != 3 {
		t.Fatalf("the v3 step = %s %q %s; want Successful, all 3 updated", res.Phase, res.Message, res.Status)
	}
	l := lockOf(t, client)
	if len(l.Superseded) != 1 || l.PreviousImages["app"] != imageV1 || l.Images["app"] != imageV3 {
		t.Errorf("lock %+v, want the v2 rollout superseded, previous images %s", l, imageV1)
	}
	want := map[string]int32{"web-0": 1, "web-1": 1, "web-2": 2} // web-2 got v2, then v3
	for name, n := range restartsOf(t, client) {
		if n != want[name] {
			t.Errorf("pod %s restarted %d times, want %d", name, n, want[name])
		}
	}
	for name, image := range podsOn(t, client) {
		if image != imageV3 {
			t.Errorf("pod %s on %s, want %s", name, image, imageV3)
		}
	}
	abort, rpcErr := serve(t, p).Abort(ro, stepContext(v3, res.Status))
	if rpcErr.HasError() || abort.Phase != types.PhaseSuccessful {
		t.Fatalf("Abort = %s %q, RpcError %q; want Successful", abort.Phase, abort.Message, rpcErr.ErrorString)
	}
	for name, image := range podsOn(t, client) {
		if image != imageV1 && image != plugintest.ImageIDOf(imageV1) {
			t.Errorf("after Abort pod %s on %s, want %s, the image before the first change", name, image, imageV1)
		}
	}
}
