package main

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// The formats of --output: text for people; json and yaml, the same document, for programs,
// as kubectl's -o json and -o yaml.
const (
	outputText = "text"
	outputJSON = "json"
	outputYAML = "yaml"
)

// checkOutput refuses a format --output does not take.
func checkOutput(format string) error {
	switch format {
	case outputText, outputJSON, outputYAML:
		return nil
	}
	return badInput("--output %q: use text, json or yaml", format)
}

// printDocument prints v as a json or yaml document and reports true; for text it prints
// nothing and reports false: each command prints text its own way.
func printDocument(out io.Writer, format string, v any) (bool, error) {
	switch format {
	case outputJSON:
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return true, fmt.Errorf("writing JSON: %w", err)
		}
		return true, nil
	case outputYAML:
		// sigs.k8s.io/yaml goes through the JSON encoding, so both formats have the same
		// field names, as kubectl's do.
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, fmt.Errorf("writing YAML: %w", err)
		}
		_, err = out.Write(b)
		return true, err
	}
	return false, nil
}
