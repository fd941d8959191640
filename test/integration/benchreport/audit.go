package benchreport

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Call is one kind of request: which client made it, on what, with which verb. Client is
// named from its User-Agent (clientOf); Resource is RESOURCE[/SUBRESOURCE][.GROUP], or
// nonResource for discovery and the other paths outside the API's resources.
type Call struct {
	Client, Resource, Verb string
}

// nonResource is the Resource of requests that name no object: discovery, /version, /metrics.
const nonResource = "(discovery and other non-resource URLs)"

// auditWindow reads the requests kube-apiserver's audit log records from its opening on. The
// log is truncated when the window opens: the apiserver appends (cluster.AuditLogFile), and
// what came before is not wanted.
type auditWindow struct {
	path   string
	offset int64
}

// openAuditWindow truncates the audit log at path and opens a window on what follows.
func openAuditWindow(path string) (auditWindow, error) {
	if err := os.Truncate(path, 0); err != nil {
		return auditWindow{}, fmt.Errorf("truncating the audit log: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return auditWindow{}, fmt.Errorf("reading the audit log: %w", err)
	}
	return auditWindow{path: path, offset: fi.Size()}, nil
}

// calls counts the requests logged since the window opened, each once, by kind.
func (w auditWindow) calls() (map[Call]int, error) {
	f, err := os.Open(w.path)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(w.offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	return parseAudit(f)
}

// parseAudit counts the requests of an audit log (JSON lines, Metadata level), each once: a
// long-running request (a watch) logs ResponseStarted, then ResponseComplete.
func parseAudit(r io.Reader) (map[Call]int, error) {
	calls := map[Call]int{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev struct {
			AuditID   string `json:"auditID"`
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef *struct {
				APIGroup    string `json:"apiGroup"`
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("decoding audit log line %q: %w", sc.Text(), err)
		}
		if seen[ev.AuditID] {
			continue
		}
		seen[ev.AuditID] = true
		resource := nonResource
		if ref := ev.ObjectRef; ref != nil && ref.Resource != "" {
			resource = ref.Resource
			if ref.Subresource != "" {
				resource += "/" + ref.Subresource
			}
			if ref.APIGroup != "" {
				resource += "." + ref.APIGroup
			}
		}
		calls[Call{Client: clientOf(ev.UserAgent), Resource: resource, Verb: ev.Verb}]++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	return calls, nil
}

// clientOf names a client from its User-Agent: the program ("inplace-rollout/v0.4.0" is
// inplace-rollout) and, for client-go's default agent with a component appended (as
// kube-controller-manager gives each controller's client), that component:
// "kube-controller-manager/v1.34.5 (linux/amd64) kubernetes/0000000/statefulset-controller" is
// kube-controller-manager/statefulset-controller.
func clientOf(userAgent string) string {
	name, _, _ := strings.Cut(userAgent, "/")
	name, _, _ = strings.Cut(name, " ")
	if name == "" {
		return "(no User-Agent)"
	}
	if _, rest, ok := strings.Cut(userAgent, ") kubernetes/"); ok {
		if _, component, ok := strings.Cut(rest, "/"); ok && component != "" {
			name += "/" + component
		}
	}
	return name
}
