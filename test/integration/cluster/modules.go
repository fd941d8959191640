package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// moduleDir returns the directory of module at version in the Go module cache, downloading it
// when missing, as the tool module hack/tools/TOOL of the repository at root pins it. what
// names the module in errors.
func moduleDir(root, tool, module, version, what string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = filepath.Join(root, "hack", "tools", tool)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("finding the %s %s module (go mod download in %s): %w: %s", what, version, cmd.Dir, err, strings.TrimSpace(stderr.String()))
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("reading go mod download's answer for %s %s: %w", what, version, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("downloading the %s %s module: %s", what, version, mod.Error)
	}
	return mod.Dir, nil
}

// applyCRDs creates the CRDs of the files matching pattern, unchanged, and waits until each is
// Established. what names their project in errors.
func (c *Cluster) applyCRDs(ctx context.Context, what, pattern string) error {
	client, err := apiextensions.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("building an apiextensions client: %w", err)
	}
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no %s CRDs match %s (%v)", what, pattern, err)
	}
	var names []string
	for _, f := range files {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := readYAML(f, &crd); err != nil {
			return err
		}
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating CRD %s from %s: %w", crd.Name, f, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		err := waitUntil(ctx, 30*time.Second, func() error {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return errors.New("not Established yet")
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s: %w", name, err)
		}
	}
	return nil
}
