package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// auditPolicy logs the requests of users, and nothing else: the RBAC tests want what each
// driver's user called, and a log of every user's requests would be large and slow. With
// everyone it logs every request, users ignored: the benchmark counts every client's.
func auditPolicy(users []string, everyone bool) string {
	const head = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
`
	if everyone {
		return head
	}
	quoted, _ := json.Marshal(users) // a JSON list is a YAML flow sequence
	return head + `    users: ` + string(quoted) + `
  - level: None
`
}

// auditUsers are the users Options.AuditLog logs.
func (c *Cluster) auditUsers() []string {
	if len(c.opts.AuditUsers) > 0 {
		return c.opts.AuditUsers
	}
	return []string{ArgoUser, InplaceTektonUser, InplaceControllerUser}
}

func (c *Cluster) auditLogPath() string { return filepath.Join(c.Dir, "audit.log") }

// auditArgs writes the audit policy and returns the apiserver flags that apply it.
func (c *Cluster) auditArgs() ([]string, error) {
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy(c.auditUsers(), c.opts.AuditEveryone)), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", policy, err)
	}
	// A fresh log per start, like etcd's data.
	_ = os.Remove(c.auditLogPath())
	args := []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + c.auditLogPath(),
		"--audit-log-format=json",
		// The default blocking mode writes each event before the request returns, so the log is
		// complete when a test reads it.
		"--audit-log-mode=blocking",
	}
	if c.opts.AuditEveryone {
		// The apiserver appends to the file it created (O_APPEND), so a reader may truncate it
		// between measurements; only a rotation, at 100 MB by default, would reopen it
		// otherwise. 1 TiB, in MB: never.
		args = append(args, "--audit-log-maxsize=1048576")
	}
	return args, nil
}

// AuditLogFile is the audit log's path (Options.AuditLog): JSON lines, one per audit event.
func (c *Cluster) AuditLogFile() (string, error) {
	if !c.opts.AuditLog {
		return "", fmt.Errorf("the cluster was started without Options.AuditLog")
	}
	return c.auditLogPath(), nil
}

// APICall is one kind of resource request a user made.
type APICall struct {
	APIGroup    string // "" for the core group
	Resource    string
	Subresource string
	Verb        string // get, list, watch, create, update, patch, delete, deletecollection
	Namespaced  bool   // the request named a namespace
}

func (a APICall) String() string {
	group := a.APIGroup
	if group == "" {
		group = "core"
	}
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	scope := "cluster-wide"
	if a.Namespaced {
		scope = "namespaced"
	}
	return fmt.Sprintf("%s %s.%s (%s)", a.Verb, res, group, scope)
}

// AuditedCalls reads the audit log (Options.AuditLog) into the resource requests user made,
// each with how many times. Requests to non-resource URLs (discovery, /version), which every
// authenticated user may make, are left out. user must be one of the audited users.
func (c *Cluster) AuditedCalls(user string) (map[APICall]int, error) {
	byNS, err := c.AuditedCallsByNamespace(user)
	if err != nil {
		return nil, err
	}
	calls := map[APICall]int{}
	for _, nsCalls := range byNS {
		for call, n := range nsCalls {
			calls[call] += n
		}
	}
	return calls, nil
}

// AuditedCallsByNamespace is AuditedCalls by the namespace each request named, "" for the
// cluster-wide ones: a test's namespace (Namespace) tells its calls from those of the tests
// that ran beside it.
func (c *Cluster) AuditedCallsByNamespace(user string) (map[string]map[APICall]int, error) {
	if !c.opts.AuditLog {
		return nil, fmt.Errorf("the cluster was started without Options.AuditLog")
	}
	if !c.opts.AuditEveryone && !slices.Contains(c.auditUsers(), user) {
		return nil, fmt.Errorf("the audit log does not log %s: add it to Options.AuditUsers", user)
	}
	f, err := os.Open(c.auditLogPath())
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	defer f.Close()
	calls := map[string]map[APICall]int{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var ev struct {
			AuditID string `json:"auditID"`
			Verb    string `json:"verb"`
			User    struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef *struct {
				APIGroup    string `json:"apiGroup"`
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				Namespace   string `json:"namespace"`
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("decoding audit log line %q: %w", sc.Text(), err)
		}
		// A watch logs ResponseStarted, then ResponseComplete when it ends: one request.
		if ev.User.Username != user || ev.ObjectRef == nil || seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		ns := ev.ObjectRef.Namespace
		if calls[ns] == nil {
			calls[ns] = map[APICall]int{}
		}
		calls[ns][APICall{
			APIGroup:    ev.ObjectRef.APIGroup,
			Resource:    ev.ObjectRef.Resource,
			Subresource: ev.ObjectRef.Subresource,
			Verb:        ev.Verb,
			Namespaced:  ns != "",
		}]++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	return calls, nil
}
