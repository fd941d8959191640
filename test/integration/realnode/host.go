package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Network of the node's pods: a /24 on a bridge of its own. The host holds the gateway address,
// which is also the node's InternalIP, where kube-apiserver dials the kubelet.
const (
	Bridge  = "inplacebr0"
	Subnet  = "10.233.77.0/24"
	Gateway = "10.233.77.1"
)

// cgroupRoot is the parent of every cgroup the kubelet makes (kubepods and its children), in
// each cgroup v1 hierarchy, so that undoing the run finds them all under one name.
const cgroupRoot = "inplace-rollout-realnode"

// sysctls are the kernel settings the kubelet changes on start (protectKernelDefaults: false).
var sysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// fixedPaths are written by the kubelet or containerd whatever their configuration says.
var fixedPaths = []string{
	"/var/lib/kubelet",
	"/var/log/containers",
	"/run/containerd",
	"/run/netns", // also /var/run/netns, a link to /run on Debian
}

// record is what the machine looked like before the node changed it, and what the node runs,
// saved before each change so that a crashed run can be undone by the next one.
type record struct {
	// Dir is the node's directory: its processes' files and mounts are under it.
	Dir string `json:"dir"`
	// Sysctls are the values before the kubelet set them, by /proc/sys path.
	Sysctls map[string]string `json:"sysctls"`
	// Created are the fixed paths that did not exist before.
	Created []string `json:"created"`
	// Netns are the network namespaces in /run/netns before.
	Netns []string `json:"netns"`
	// NFTables are the nftables tables before ("ip filter", ...): the kubelet's iptables calls
	// create the ones missing, and undo deletes those.
	NFTables []string `json:"nftables"`
	// IPTables are the chains before, by "iptables TABLE" or "ip6tables TABLE", so that the
	// chains the kubelet adds to a table that was there can be found and removed.
	IPTables map[string][]string `json:"iptables"`
	// PIDs of the kubelet and containerd, by name.
	PIDs map[string]int `json:"pids"`
}

// stateDir holds the machine-wide lock and record, beside the tool cache every clone shares.
func stateDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		base = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	return filepath.Join(base, "inplace-rollout", "realnode")
}

func recordPath() string { return filepath.Join(stateDir(), "record.json") }

// newRecord is the record of a node in dir, from the machine m as it was before the node
// started, and the iptables chains there were then.
func newRecord(dir string, m Machine) (*record, error) {
	r := &record{Dir: dir, Sysctls: map[string]string{}, IPTables: map[string][]string{}, PIDs: map[string]int{},
		Netns: m.Netns, NFTables: m.NFTables}
	for _, s := range sysctls {
		if m.Sysctls[s] == "" {
			return nil, fmt.Errorf("recording the machine before the real node starts: sysctl %s could not be read from /proc/sys", s)
		}
		r.Sysctls[s] = m.Sysctls[s]
	}
	for _, p := range fixedPaths {
		if !slices.Contains(m.Paths, p) {
			r.Created = append(r.Created, p)
		}
	}
	for _, t := range ipTables() {
		r.IPTables[t] = chains(t)
	}
	return r, nil
}

// ipTables are the iptables tables the kubelet writes to, for IPv4 and IPv6.
func ipTables() []string {
	var out []string
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, t := range []string{"filter", "nat", "mangle"} {
			out = append(out, cmd+" "+t)
		}
	}
	return out
}

// nfTables lists the nftables tables, as "FAMILY NAME".
func nfTables() []string {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables
}

// chains lists the chains of a table ("iptables filter"); none when the command is missing or
// the table is not loaded.
func chains(table string) []string {
	cmd, t, _ := strings.Cut(table, " ")
	// iptables-save creates the table it is asked for when nftables lacks it.
	family := map[string]string{"iptables": "ip", "ip6tables": "ip6"}[cmd]
	if !slices.Contains(nfTables(), family+" "+t) {
		return nil
	}
	out, err := exec.Command(cmd+"-save", "-t", t).Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, ":") {
			names = append(names, strings.Fields(line[1:])[0])
		}
	}
	return names
}

// removeChains removes the chains of table that are not in before (the kubelet's KUBE-FIREWALL,
// KUBE-KUBELET-CANARY, ...): first the rules of any chain that jump to them, then the chains.
func removeChains(table string, before []string) error {
	cmd, t, _ := strings.Cut(table, " ")
	added := map[string]bool{}
	for _, c := range chains(table) {
		if !slices.Contains(before, c) {
			added[c] = true
		}
	}
	if len(added) == 0 {
		return nil
	}
	out, err := exec.Command(cmd+"-save", "-t", t).Output()
	if err != nil {
		return fmt.Errorf("reading %s table %s: %w", cmd, t, err)
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" || added[f[1]] {
			continue
		}
		if i := slices.Index(f, "-j"); i < 0 || i+1 >= len(f) || !added[f[i+1]] {
			continue
		}
		args := append([]string{"-t", t, "-D"}, f[1:]...)
		if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing %s rule %q: %w: %s", cmd, line, err, out))
		}
	}
	for c := range added {
		_ = exec.Command(cmd, "-t", t, "-F", c).Run()
		if out, err := exec.Command(cmd, "-t", t, "-X", c).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing %s chain %s/%s: %w: %s", cmd, t, c, err, out))
		}
	}
	return errors.Join(errs...)
}

func (r *record) save() error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the real node's record: %w", err)
	}
	tmp := recordPath() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing the real node's record: %w", err)
	}
	if err := os.Rename(tmp, recordPath()); err != nil {
		return fmt.Errorf("writing the real node's record: %w", err)
	}
	return nil
}

func loadRecord() (*record, error) {
	data, err := os.ReadFile(recordPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the real node's record: %w", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decoding the real node's record %s: %w", recordPath(), err)
	}
	return &r, nil
}

// undo puts the machine back as r found it: it kills every process the node started (the
// kubelet, containerd, its shims and the containers), unmounts what they mounted, removes the
// bridge, the cgroups and the fixed paths they created, deletes the iptables chains the kubelet
// added and restores the sysctls. Each step runs even when an earlier one failed; the errors
// are joined.
func (r *record) undo(log *slog.Logger) error {
	if r.Dir == "" || r.Dir == "/" {
		return fmt.Errorf("undoing a real node run: its record names no directory (%q); remove %s by hand", r.Dir, recordPath())
	}
	var errs []error
	for _, name := range []string{"kubelet", "containerd"} {
		if pid := r.PIDs[name]; pid > 0 && ownProcess(pid, r.Dir) {
			kill(pid, 10*time.Second)
		}
	}
	// The shims outlive containerd, and the containers outlive their shims.
	for _, pid := range processesMentioning(r.Dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	errs = append(errs, killCgroups())
	waitGone(processesMentioning(r.Dir), 5*time.Second)
	errs = append(errs, unmountUnder(r.Dir, r.newNetns()))
	for _, ns := range r.newNetns() {
		if err := os.Remove(ns); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing network namespace %s: %w", ns, err))
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", Bridge)); err == nil {
		if out, err := exec.Command("ip", "link", "del", Bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("removing bridge %s: %w: %s", Bridge, err, out))
		}
	}
	errs = append(errs, removeCgroups())
	// A table that was not there goes whole; in one that was, the chains added go.
	for _, t := range nfTables() {
		if !slices.Contains(r.NFTables, t) {
			if out, err := exec.Command("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("removing nftables table %s: %w: %s", t, err, out))
			}
		}
	}
	for table, before := range r.IPTables {
		errs = append(errs, removeChains(table, before))
	}
	for s, v := range r.Sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", s), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", s, v, err))
		}
	}
	for _, p := range r.Created {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	err := errors.Join(errs...)
	if err == nil {
		log.Info("machine restored", "dir", r.Dir)
	}
	return err
}

// newNetns lists the network namespaces that were not there before.
func (r *record) newNetns() []string {
	var out []string
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if !slices.Contains(r.Netns, e.Name()) {
			out = append(out, filepath.Join("/run/netns", e.Name()))
		}
	}
	return out
}

// ownProcess reports whether pid is a process of this node: its command line names the node's
// directory (a PID can be reused after a crash).
func ownProcess(pid int, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), dir)
}

// processesMentioning lists the processes whose command line names dir: containerd, the
// kubelet and the shims (started with containerd's address, which is under dir).
func processesMentioning(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if ownProcess(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// kill sends SIGTERM, then SIGKILL after grace.
func kill(pid int, grace time.Duration) {
	if syscall.Kill(pid, syscall.SIGTERM) != nil {
		return
	}
	waitGone([]int{pid}, grace)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitGone([]int{pid}, 5*time.Second)
}

func waitGone(pids []int, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			// A zombie child of this process is gone for our purpose.
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil || strings.Contains(string(stat), ") Z ") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// cgroupDirs lists the node's cgroup directories in every hierarchy, deepest first.
func cgroupDirs() []string {
	var dirs []string
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		root := filepath.Join(h, cgroupRoot)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// killCgroups kills every process in the node's cgroups: the containers.
func killCgroups() error {
	for range 50 {
		alive := 0
		for _, d := range cgroupDirs() {
			data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					alive++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if alive == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("killing the real node's containers: processes are still in its cgroups after 5s")
}

func removeCgroups() error {
	var errs []error
	for _, d := range cgroupDirs() {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount point under dir and the given paths, deepest first.
func unmountUnder(dir string, extra []string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading mounts: %w", err)
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if strings.HasPrefix(p, dir+"/") || p == dir || slices.Contains(extra, p) || strings.HasPrefix(p, "/run/containerd/") {
			points = append(points, p)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (a space is \040).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Cleanup undoes a run that ended without Stop (its process was killed), from the record it
// left. It takes the machine-wide lock, so it waits for a node that is running; with no record
// it does nothing.
func Cleanup(log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	unlock, err := lock(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	return undoRecorded(log)
}

// undoRecorded undoes the recorded run, if any, and removes its record once the machine is back.
func undoRecorded(log *slog.Logger) error {
	r, err := loadRecord()
	if err != nil || r == nil {
		return err
	}
	log.Info("undoing the changes of an earlier real node run", "dir", r.Dir)
	if err := r.undo(log); err != nil {
		return err
	}
	return os.Remove(recordPath())
}
