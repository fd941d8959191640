package main

import (
	"strings"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

func TestBarLineFillsWithTheBatchInProgress(t *testing.T) {
	batches, err := rollout.ParseBatches("1,50%,100%")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		st          rollout.Status
		hashes      int
		pods, inAll string
	}{
		{"first batch not done", rollout.Status{Batch: 1, Batches: 3, Total: 6, Updated: 0}, 0, "0/1 pods", "(0/6 in all)"},
		{"second batch starts empty", rollout.Status{Batch: 2, Batches: 3, Total: 6, Updated: 1}, 0, "0/2 pods", "(1/6 in all)"},
		{"second batch half done", rollout.Status{Batch: 2, Batches: 3, Total: 6, Updated: 2}, 15, "1/2 pods", "(2/6 in all)"},
		{"last batch done", rollout.Status{Batch: 3, Batches: 3, Total: 6, Updated: 6}, 30, "3/3 pods", "(6/6 in all)"},
		{"no batch known yet", rollout.Status{Total: 6, Updated: 3}, 15, "3/6 pods", "(3/6 in all)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := barLine(tt.st, batches)
			if got := strings.Count(line, "#"); got != tt.hashes {
				t.Errorf("%q: %d of 30 filled, want %d", line, got, tt.hashes)
			}
			if !strings.Contains(line, tt.pods) || !strings.Contains(line, tt.inAll) {
				t.Errorf("%q, want %q and %q", line, tt.pods, tt.inAll)
			}
		})
	}
}
