package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Machine is what a real node run may change on this machine, read so that a test can prove a
// run left it as it found it.
type Machine struct {
	Sysctls  map[string]string
	NFTables []string
	Links    []string
	Netns    []string
	Mounts   []string
	Paths    []string
	Cgroups  []string
	Procs    []string
}

// ReadMachine reads the machine's state as it concerns a real node.
func ReadMachine() Machine {
	m := Machine{Sysctls: map[string]string{}, NFTables: nfTables()}
	for _, s := range sysctls {
		v, _ := os.ReadFile(filepath.Join("/proc/sys", s))
		m.Sysctls[s] = strings.TrimSpace(string(v))
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		m.Links = append(m.Links, l.Name())
	}
	netns, _ := os.ReadDir("/run/netns")
	for _, n := range netns {
		m.Netns = append(m.Netns, n.Name())
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 4 {
				m.Mounts = append(m.Mounts, unescapeMount(f[4]))
			}
		}
	}
	for _, p := range fixedPaths {
		if _, err := os.Lstat(p); err == nil {
			m.Paths = append(m.Paths, p)
		}
	}
	m.Cgroups = cgroupDirs()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		switch filepath.Base(strings.TrimSuffix(exe, " (deleted)")) {
		case "containerd", "containerd-shim-runc-v2", "kubelet", "runc":
			m.Procs = append(m.Procs, filepath.Base(exe))
		}
	}
	slices.Sort(m.Mounts)
	slices.Sort(m.NFTables)
	slices.Sort(m.Procs)
	return m
}

// Diff lists how after differs from m, one line per difference; none means the same machine.
func (m Machine) Diff(after Machine) []string {
	var out []string
	for k, v := range m.Sysctls {
		if after.Sysctls[k] != v {
			out = append(out, fmt.Sprintf("sysctl %s: %s, was %s", k, after.Sysctls[k], v))
		}
	}
	list := func(what string, before, now []string) {
		for _, x := range now {
			if !slices.Contains(before, x) {
				out = append(out, fmt.Sprintf("%s %s is new", what, x))
			}
		}
		for _, x := range before {
			if !slices.Contains(now, x) {
				out = append(out, fmt.Sprintf("%s %s is gone", what, x))
			}
		}
	}
	list("nftables table", m.NFTables, after.NFTables)
	list("network link", m.Links, after.Links)
	list("network namespace", m.Netns, after.Netns)
	list("mount", m.Mounts, after.Mounts)
	list("path", m.Paths, after.Paths)
	list("cgroup", m.Cgroups, after.Cgroups)
	list("process", m.Procs, after.Procs)
	return out
}
