package analysis

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// promRegex turns the inside of a double-quoted PromQL string holding a regular expression
// into the regexp Prometheus compiles for =~: the literal unquoted, anchored at both ends.
func promRegex(t *testing.T, escaped string) *regexp.Regexp {
	t.Helper()
	unquoted, err := strconv.Unquote(`"` + escaped + `"`)
	if err != nil {
		t.Fatalf("%q is not the inside of a valid double-quoted string: %v", escaped, err)
	}
	re, err := regexp.Compile(`^(?:` + unquoted + `)$`)
	if err != nil {
		t.Fatalf("unquoted %q does not compile: %v", unquoted, err)
	}
	return re
}

// stringLiteral scans the double-quoted PromQL string that starts right after prefix in query,
// stopping at the first unescaped quote as the PromQL lexer does, and returns its inside and
// what follows the closing quote.
func stringLiteral(t *testing.T, query, prefix string) (inside, rest string) {
	t.Helper()
	i := strings.Index(query, prefix)
	if i < 0 {
		t.Fatalf("%q not found in %q", prefix, query)
	}
	s := query[i+len(prefix):]
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++ // skip the escaped character
		case '"':
			return s[:j], s[j+1:]
		case '\n':
			t.Fatalf("raw newline inside the string literal in %q", query)
		}
	}
	t.Fatalf("unterminated string literal after %q in %q", prefix, query)
	return "", ""
}

func TestPodRegex(t *testing.T) {
	tests := []struct {
		name     string
		pods     []string
		mismatch []string // names the regex must not match
	}{
		{"plain", []string{"web-7d9f-abcde"}, []string{"web-7d9f-abcd", "web-7d9f-abcdef", "xweb-7d9f-abcde", ""}},
		{"dot", []string{"a.b"}, []string{"aXb", "a.bc", "za.b", "ab", ""}},
		{"alternation", []string{"x|y"}, []string{"x", "y", "x|", "|y", "xy", ""}},
		{"group and star", []string{"(.*)"}, []string{"", "anything", "()", "(.)", "(..)"}},
		{"class and plus", []string{"[a-z]+"}, []string{"a", "abc", "[a-z]", "[a-z]++", "b+", ""}},
		{"anchors", []string{"^$"}, []string{"", "^", "$", "^^$"}},
		{"braces and question mark", []string{"a{2}?"}, []string{"aa", "a", "a{2}", "aa?"}},
		{"double quotes", []string{`say "hi"`, `"`}, []string{"say hi", `say \"hi\"`, `""`, ""}},
		{"backslashes", []string{`back\slash`, `\`, `\\d`}, []string{`back\\slash`, "backslash", `\\`, `\d`, "1", ""}},
		{"escape lookalikes", []string{`\n`, `\"`}, []string{"\n", `"`, `\`, `n`}},
		{"control characters", []string{"new\nline", "tab\there", "cr\rhere"}, []string{"new", "line", "newXline", `new\nline`, "tabXhere", "tab here", `cr\rhere`}},
		{"unicode", []string{"pöd-ü.1"}, []string{"pöd-üX1", "pod-u.1"}},
		{"several names", []string{"a.b", "x|y", "(.*)", "[a-z]+", `q"b`, `s\t`}, []string{"aXb", "x", "y", "a.b|x|y", "", "zz", `q\"b`, `s\\t`, "s\t"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			escaped := podRegex(tt.pods)
			if strings.ContainsAny(escaped, "\n\r") {
				t.Errorf("podRegex(%q) = %q holds a raw line break", tt.pods, escaped)
			}
			re := promRegex(t, escaped)
			for _, p := range tt.pods {
				if !re.MatchString(p) {
					t.Errorf("regex %q (from %q) does not match the pod %q", re, escaped, p)
				}
			}
			for _, m := range tt.mismatch {
				if re.MatchString(m) {
					t.Errorf("regex %q (from %q) matches %q, which is not one of %q", re, escaped, m, tt.pods)
				}
			}
		})
	}
}

func TestPodRegexEmptyMatchesNothing(t *testing.T) {
	for _, pods := range [][]string{nil, {}} {
		re := promRegex(t, podRegex(pods))
		// Prometheus treats a missing label as the empty string, so a matcher that accepts ""
		// selects every series without a pod label.
		for _, name := range []string{"", "web-1", "$^", "a", "\n"} {
			if re.MatchString(name) {
				t.Errorf("podRegex(%#v) = %q matches %q; an empty pod list must match nothing", pods, re, name)
			}
		}
	}
}

func TestRenderHostileNames(t *testing.T) {
	scope := Scope{
		Namespace:  `team "a"\ns` + "\n",
		Pods:       []string{"a.b", `x|y`, `"quoted"`, `back\slash`, "new\nline"},
		StablePods: []string{"(.*)", "[a-z]+"},
		Window:     90 * time.Second,
	}
	const text = `sum(rate(m{namespace="{{.Namespace}}",pod=~"{{.Pods}}"}[{{.Window}}])) - sum(m{pod=~"{{.StablePods}}"})`
	q, err := render("hostile", text, scope)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if strings.ContainsAny(q, "\n\r") {
		t.Errorf("rendered query holds a raw line break: %q", q)
	}

	ns, rest := stringLiteral(t, q, `namespace="`)
	if got, err := strconv.Unquote(`"` + ns + `"`); err != nil || got != scope.Namespace {
		t.Errorf("namespace literal %q unquotes to %q, %v; want %q", ns, got, err, scope.Namespace)
	}
	if !strings.HasPrefix(rest, `,pod=~"`) {
		t.Fatalf("the namespace literal ends early: rest is %q", rest)
	}

	pods, rest := stringLiteral(t, q, `,pod=~"`)
	if !strings.HasPrefix(rest, `}[1m30s])) - sum(m{pod=~"`) {
		t.Fatalf("the pods literal ends early, or the window is wrong: rest is %q", rest)
	}
	re := promRegex(t, pods)
	for _, p := range scope.Pods {
		if !re.MatchString(p) {
			t.Errorf("pods regex %q does not match %q", re, p)
		}
	}
	for _, p := range append([]string{"aXb", "x", "y", "quoted", `back\\slash`, "new", ""}, scope.StablePods...) {
		if re.MatchString(p) {
			t.Errorf("pods regex %q matches %q", re, p)
		}
	}

	stable, rest := stringLiteral(t, q, `sum(m{pod=~"`)
	if rest != `})` {
		t.Errorf("after the stable pods literal: %q, want %q", rest, `})`)
	}
	sre := promRegex(t, stable)
	for _, p := range scope.StablePods {
		if !sre.MatchString(p) {
			t.Errorf("stable regex %q does not match %q", sre, p)
		}
	}
	for _, p := range append([]string{"abc", "anything", "a"}, scope.Pods...) {
		if sre.MatchString(p) {
			t.Errorf("stable regex %q matches %q", sre, p)
		}
	}
}

func TestRenderWindow(t *testing.T) {
	tests := []struct {
		window time.Duration
		want   string
	}{
		{90 * time.Second, "1m30s"},
		{time.Minute, "1m"},
		{2 * time.Hour, "2h"},
		{1500 * time.Millisecond, "1s500ms"},
		{36 * time.Hour, "1d12h"},
		{0, "0s"},
	}
	for _, tt := range tests {
		got, err := render("w", "[{{.Window}}]", Scope{Window: tt.window})
		if err != nil {
			t.Errorf("render with window %v: %v", tt.window, err)
			continue
		}
		if got != "["+tt.want+"]" {
			t.Errorf("window %v renders as %q, want %q", tt.window, got, "["+tt.want+"]")
		}
	}
}

func TestRenderBuiltinQueries(t *testing.T) {
	scope := Scope{Namespace: "shop", Pods: []string{"web-1", "web-2"}, Window: 2 * time.Minute}
	for name, text := range map[string]string{
		"errorRate": errorRateQuery, "latency": latencyQuery, "traffic": trafficQuery,
		"cpu": cpuQuery, "memory": memoryQuery, "limits": limitsQuery,
	} {
		q, err := render(name, text, scope)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if strings.Contains(q, "{{") || strings.Contains(q, "}}") {
			t.Errorf("%s: template actions left in %q", name, q)
		}
		if !strings.Contains(q, `namespace="shop",pod=~"web-1|web-2"`) {
			t.Errorf("%s: %q does not select the namespace and pods", name, q)
		}
		if strings.Contains(text, "{{.Window}}") && !strings.Contains(q, "[2m]") {
			t.Errorf("%s: %q lacks the window [2m]", name, q)
		}
		if strings.Count(q, "(") != strings.Count(q, ")") {
			t.Errorf("%s: unbalanced parentheses in %q", name, q)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
	}{
		{"unknown field", `up{pod=~"{{.Nope}}"}`, []string{"rendering query bad", "Nope"}},
		{"unknown nested field", `{{.Pods.Name}}`, []string{"rendering query bad"}},
		{"does not parse", `up{pod=~"{{.Pods"}`, []string{"bad"}},
		{"unclosed action", `{{if .Pods}}up`, []string{"bad"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := render("bad", tt.text, Scope{Pods: []string{"p"}})
			if err == nil {
				t.Fatalf("render(%q) = %q, want an error", tt.text, q)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
