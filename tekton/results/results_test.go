package results

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name string
		st   rollout.Status
		want map[string]string
	}{
		{"succeeded", rollout.Status{Phase: rollout.PhaseSucceeded, Updated: 6, Message: "6/6 pods updated"},
			map[string]string{Phase: "Succeeded", UpdatedPods: "6", RolledBack: "0", Message: "6/6 pods updated"}},
		{"rolled back", rollout.Status{Phase: rollout.PhaseRolledBack, Updated: 0, RolledBack: 2, Message: "pod web-5 failed"},
			map[string]string{Phase: "RolledBack", UpdatedPods: "0", RolledBack: "2", Message: "pod web-5 failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "results")
			if err := Write(dir, tt.st); err != nil {
				t.Fatalf("Write: %v", err)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if want := slices.Sorted(slices.Values(Names)); !slices.Equal(names, want) {
				t.Errorf("files %v, want %v", names, want)
			}
			for name, want := range tt.want {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}
