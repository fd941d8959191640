package v1alpha1_test

import (
	"reflect"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
)

func TestLastVerdict(t *testing.T) {
	pass := &v1alpha1.AnalysisVerdict{Batch: 2, Pods: 4, Verdict: "Pass"}
	tests := []struct {
		name               string
		run                *analysis.Run
		rolloutID, shownID string
		shown, want        *v1alpha1.AnalysisVerdict
	}{
		{"a run's verdict", &analysis.Run{Batch: 3, Pods: 6, Verdict: analysis.Fail}, "r-1", "r-1", pass, &v1alpha1.AnalysisVerdict{Batch: 3, Pods: 6, Verdict: "Fail"}},
		{"a run measuring", &analysis.Run{Batch: 1, Pods: 2}, "r-1", "", nil, &v1alpha1.AnalysisVerdict{Batch: 1, Pods: 2, Verdict: "Running"}},
		{"none: the same rollout's kept", nil, "r-1", "r-1", pass, pass},
		{"none: another rollout's dropped", nil, "r-2", "r-1", pass, nil},
		{"none, no rollout", nil, "", "", pass, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := v1alpha1.LastVerdict(tt.run, tt.rolloutID, tt.shown, tt.shownID); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LastVerdict(%+v, %q, %+v, %q) = %+v, want %+v", tt.run, tt.rolloutID, tt.shown, tt.shownID, got, tt.want)
			}
		})
	}
}
