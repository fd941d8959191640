package e2e

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/inplace-rollout/inplace-rollout/test/integration/cluster"
)

// docs/conformance.md lists every conformance row this package runs, and no other.
func TestConformanceTableListsEveryRow(t *testing.T) {
	root, err := cluster.RepoRoot()
	must(t, err, "finding the repository root")
	doc, err := os.ReadFile(root + "/docs/conformance.md")
	must(t, err, "reading docs/conformance.md")
	src, err := os.ReadFile("conformance_test.go")
	must(t, err, "reading conformance_test.go")
	name := regexp.MustCompile("TestConformance[A-Za-z]+")
	var rows []string
	for _, m := range regexp.MustCompile(`(?m)^func (TestConformance[A-Za-z]+)\(`).FindAllSubmatch(src, -1) {
		rows = append(rows, string(m[1]))
	}
	listed := map[string]bool{}
	for _, m := range name.FindAll(doc, -1) {
		listed[string(m)] = true
	}
	for _, r := range rows {
		if !listed[r] {
			t.Errorf("docs/conformance.md has no row for %s", r)
		}
	}
	for r := range listed {
		if !slices.Contains(rows, r) {
			t.Errorf("docs/conformance.md lists %s, which conformance_test.go does not define", r)
		}
	}
}
