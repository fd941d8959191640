// Command krewmanifest writes the krew plugin manifest of a release (dist/inplace-rollout.yaml)
// from its archives: one platform per archive, named kubectl-inplace_rollout-OS-ARCH.tar.gz or
// .zip, with the archive's address under -url and its sha256.
//
// krew wants spec.version to be a semantic version with a leading v. A VERSION that is not one
// (a bare commit hash from git describe, or "dev") is written as v0.0.0-VERSION, with every
// character semver does not allow replaced by '-'.
//
// Usage: go run ./hack/krewmanifest -version VERSION -url URL -o OUT ARCHIVE...
//
// With -print-version it prints only the semantic version VERSION is written as, which the
// release's Helm chart takes too (hack/chart-package.sh), and writes nothing.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Plugin is the plugin's name in krew, and Bin the executable's name in every archive.
const (
	Plugin = "inplace-rollout"
	Bin    = "kubectl-inplace_rollout"
)

const (
	homepage         = "https://github.com/inplace-rollout/inplace-rollout"
	shortDescription = "Update pod images in place, in batches gated on metrics"
	description      = `Updates the container images of a StatefulSet's, DaemonSet's or Deployment's
live pods in place: each pod keeps its UID, IP, node and volumes. Pods are
updated in batches; every batch can be gated on Prometheus golden signals, and
a failed batch puts every touched pod back on the exact image it ran before.
`
)

func main() {
	version := flag.String("version", "", "the release's version (VERSION)")
	url := flag.String("url", "", "the address the archives are downloaded from (RELEASE_URL)")
	out := flag.String("o", "", "the manifest to write")
	printVersion := flag.Bool("print-version", false, "print the semantic version -version is written as, and exit")
	flag.Parse()
	if *printVersion && *version != "" {
		fmt.Println(Version(*version))
		return
	}
	if *version == "" || *url == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: krewmanifest -version VERSION -url URL -o OUT ARCHIVE...")
		os.Exit(2)
	}
	b, err := Manifest(*version, *url, flag.Args())
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "krewmanifest:", err)
		os.Exit(1)
	}
}

// semverRE is semver 2.0.0's own expression, with the leading v krew wants.
var semverRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?` +
	`(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

var notSemverChar = regexp.MustCompile(`[^0-9A-Za-z-]`)

// Version is the plugin's spec.version for the release VERSION v: v itself when it is a
// v-prefixed semantic version, else v0.0.0-v with every character semver does not allow in a
// pre-release replaced by '-' (v0.0.0-dev, v0.0.0-2edb11d); a wholly numeric one with a
// leading zero, which semver forbids, gets a leading '-'.
func Version(v string) string {
	if semverRE.MatchString(v) {
		return v
	}
	pre := notSemverChar.ReplaceAllString(v, "-")
	if pre == "" {
		pre = "dev"
	}
	if _, err := strconv.ParseUint(pre, 10, 64); err == nil && len(pre) > 1 && pre[0] == '0' {
		pre = "-" + pre
	}
	return "v0.0.0-" + pre
}

// archiveRE is an archive's file name: kubectl-inplace_rollout-OS-ARCH.tar.gz or .zip.
var archiveRE = regexp.MustCompile(`^` + regexp.QuoteMeta(Bin) + `-([a-z0-9]+)-([a-z0-9]+)\.(tar\.gz|zip)$`)

type platform struct {
	os, arch, file, sum string
}

// Manifest returns the manifest of the release version whose archives are the files archives,
// downloaded from url.
func Manifest(version, url string, archives []string) ([]byte, error) {
	if len(archives) == 0 {
		return nil, errors.New("no archives")
	}
	var platforms []platform
	for _, a := range archives {
		name := filepath.Base(a)
		m := archiveRE.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("%s: want an archive named %s-OS-ARCH.tar.gz or .zip", a, Bin)
		}
		if (m[1] == "windows") != (m[3] == "zip") {
			return nil, fmt.Errorf("%s: windows archives are zip, others tar.gz", a)
		}
		data, err := os.ReadFile(a)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		platforms = append(platforms, platform{os: m[1], arch: m[2], file: name, sum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(platforms, func(i, j int) bool { return platforms[i].file < platforms[j].file })
	for i := 1; i < len(platforms); i++ {
		if platforms[i].os == platforms[i-1].os && platforms[i].arch == platforms[i-1].arch {
			return nil, fmt.Errorf("two archives for %s/%s", platforms[i].os, platforms[i].arch)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: krew.googlecontainertools.github.com/v1alpha2\nkind: Plugin\nmetadata:\n  name: %s\nspec:\n", Plugin)
	fmt.Fprintf(&b, "  version: %s\n  homepage: %s\n  shortDescription: %s\n  description: |\n", Version(version), homepage, shortDescription)
	for _, line := range strings.SplitAfter(strings.TrimSuffix(description, "\n"), "\n") {
		fmt.Fprintf(&b, "    %s", line)
	}
	b.WriteString("\n  platforms:\n")
	for _, p := range platforms {
		bin := Bin
		if p.os == "windows" {
			bin += ".exe"
		}
		fmt.Fprintf(&b, "  - selector:\n      matchLabels:\n        os: %s\n        arch: %s\n", p.os, p.arch)
		fmt.Fprintf(&b, "    uri: %s/%s\n    sha256: %s\n", strings.TrimSuffix(url, "/"), p.file, p.sum)
		fmt.Fprintf(&b, "    files:\n    - from: %s\n      to: .\n    bin: %s\n", bin, bin)
	}
	return []byte(b.String()), nil
}
