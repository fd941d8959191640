package strictdecode

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

type inner struct {
	Count intstr.IntOrString `json:"count"`
	Wait  metav1.Duration    `json:"wait,omitempty"`
}

type embedded struct {
	Kind string `json:"kind,omitempty"`
}

type doc struct {
	embedded `json:",inline"`
	Name     string            `json:"name"`
	Items    []inner           `json:"items,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Nested   *inner            `json:"nested,omitempty"`
	Skipped  string            `json:"-"`
}

func TestDecode(t *testing.T) {
	describe := []Option{Describe(intstr.IntOrString{}, "a count or a percentage")}
	tests := []struct {
		name string
		in   string
		opts []Option
		want string // an error containing this, or "" for success
	}{
		{"yaml", "kind: K\nname: a\nitems: [{count: 3}, {count: 50%, wait: 1s}]\n", nil, ""},
		{"json", `{"name":"a","labels":{"x":"y"}}`, nil, ""},
		{"inline fields are the struct's own", "kind: K", nil, ""},
		{"unknown field by path", "name: a\nitems: [{count: 1}, {cout: 2}]", nil, `unknown field "items[1].cout" (known fields here: count, wait)`},
		{"unknown top-level field", "nme: a", nil, `unknown field "nme" (known fields here: items, kind, labels, name, nested)`},
		{"a field named -", `{"Skipped": "x"}`, nil, `unknown field "Skipped"`},
		{"case matters", "Name: a", nil, `unknown field "Name"`},
		{"a type that decodes itself, by path", "nested: {count: true}", nil, "nested.count: "},
		{"described", "nested: {count: true}", describe, "nested.count: want a count or a percentage, got true"},
		{"a duration", "items: [{count: 1, wait: soon}]", nil, "items[0].wait: "},
		{"wrong plain type", "name: [a]", nil, "name: a string cannot hold array"},
		{"wrong map value type", "labels: {a: {b: c}}", nil, "labels: a string cannot hold object"},
		{"not an object", "- a", nil, "cannot hold array"},
		{"empty", "  \n", nil, ErrEmpty.Error()},
		{"null", "null", nil, ErrEmpty.Error()},
		{"bad yaml", "a: [", nil, "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			err := Decode([]byte(tt.in), &d, tt.opts...)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Decode(%q): %v", tt.in, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Decode(%q) = %v, want an error containing %q", tt.in, err, tt.want)
			}
		})
	}
	var d doc
	if err := Decode([]byte("kind: K\nname: a\nitems: [{count: 50%, wait: 1m30s}]"), &d); err != nil {
		t.Fatal(err)
	}
	if d.Kind != "K" || d.Name != "a" || d.Items[0].Count.String() != "50%" || d.Items[0].Wait.Duration != 90*time.Second {
		t.Errorf("decoded %+v", d)
	}
	if err := Decode([]byte(""), &d); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty document: %v, want ErrEmpty", err)
	}
}

// ports holds int-or-strings of another meaning than inner's count.
type ports struct {
	Port  intstr.IntOrString   `json:"port"`
	Ports []intstr.IntOrString `json:"ports,omitempty"`
	Inner *inner               `json:"inner,omitempty"`
}

// inlined embeds ports, whose fields are its own in JSON.
type inlined struct {
	ports `json:",inline"`
	Extra string `json:"extra,omitempty"`
}

// TestDescribeField: a field described by DescribeField is reported with its own description
// over its type's, in a list as each element, and when its struct is inlined in another; a
// field of the same type elsewhere keeps its type's.
func TestDescribeField(t *testing.T) {
	opts := []Option{
		Describe(intstr.IntOrString{}, "a count or a percentage"),
		DescribeField(ports{}, "port", "a port"),
		DescribeField(ports{}, "ports", "a port"),
	}
	tests := []struct {
		name string
		in   string
		into any
		want string
	}{
		{"the field", "port: true", &ports{}, "port: want a port, got true"},
		{"each element of a list", "port: 1\nports: [2, 3.5]", &ports{}, "ports[1]: want a port, got 3.5"},
		{"the type elsewhere", "port: 1\ninner: {count: true}", &ports{}, "inner.count: want a count or a percentage, got true"},
		{"inlined in another struct", "extra: x\nport: {}", &inlined{}, "port: want a port, got {}"},
		{"accepted", "port: http\nports: [8080, metrics]", &ports{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Decode([]byte(tt.in), tt.into, opts...)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Decode(%q): %v", tt.in, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Decode(%q) = %v, want an error containing %q", tt.in, err, tt.want)
			}
		})
	}
}
