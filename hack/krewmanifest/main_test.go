package main

import "testing"

func TestVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":              "v1.2.3",
		"v1.2.3-rc.1+build.5": "v1.2.3-rc.1+build.5",
		"v1.2.0-3-gabcdef0":   "v1.2.0-3-gabcdef0",
		"2edb11d":             "v0.0.0-2edb11d",
		"2edb11d-dirty":       "v0.0.0-2edb11d-dirty",
		"dev":                 "v0.0.0-dev",
		"":                    "v0.0.0-dev",
		"v1.2":                "v0.0.0-v1-2",
		"0123456":             "v0.0.0--0123456",
		"1234567":             "v0.0.0-1234567",
	} {
		got := Version(in)
		if got != want {
			t.Errorf("Version(%q) = %q, want %q", in, got, want)
		}
		if !semverRE.MatchString(got) {
			t.Errorf("Version(%q) = %q, not a semantic version", in, got)
		}
	}
}
