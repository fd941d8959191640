package v1alpha1_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
	"sigs.k8s.io/yaml"

	"github.com/inplace-rollout/inplace-rollout/analysis"
	"github.com/inplace-rollout/inplace-rollout/pkg/apis/v1alpha1"
)

// module is the import path the repository's packages start with.
const module = "github.com/inplace-rollout/inplace-rollout/"

// repoRoot is the repository root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..", "..")

// readCRD reads config/crd/inplacerollouts.yaml.
func readCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	return readCRDFile(t, "inplacerollouts.yaml")
}

// readCRDFile reads the CRD config/crd/name.
func readCRDFile(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	path := filepath.Join(repoRoot, "config", "crd", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return &crd
}

// TestCRDNames: the CRD is the rollout's kind, namespaced, one served and stored version with
// a status subresource, with the short name and printer columns a person lists them by.
func TestCRDNames(t *testing.T) {
	crd := readCRD(t)
	checks := []struct {
		what      string
		got, want any
	}{
		{"metadata.name", crd.Name, "inplacerollouts." + v1alpha1.Group},
		{"spec.group", crd.Spec.Group, v1alpha1.Group},
		{"spec.scope", crd.Spec.Scope, apiextensionsv1.NamespaceScoped},
		{"spec.names.kind", crd.Spec.Names.Kind, v1alpha1.Kind},
		{"spec.names.plural", crd.Spec.Names.Plural, "inplacerollouts"},
		{"spec.names.singular", crd.Spec.Names.Singular, "inplacerollout"},
		{"spec.names.listKind", crd.Spec.Names.ListKind, v1alpha1.Kind + "List"},
		{"spec.names.shortNames", crd.Spec.Names.ShortNames, []string{"ipr"}},
		{"number of versions", len(crd.Spec.Versions), 1},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if len(crd.Spec.Versions) != 1 {
		return
	}
	v := crd.Spec.Versions[0]
	if v.Name != v1alpha1.Version || !v.Served || !v.Storage {
		t.Errorf("version %s served %v storage %v, want %s served and stored", v.Name, v.Served, v.Storage, v1alpha1.Version)
	}
	columns := map[string]string{}
	for _, c := range v.AdditionalPrinterColumns {
		columns[c.Name] = c.JSONPath
	}
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("version %s has no status subresource: the controller's status writes would change the spec", v.Name)
	}
	for name, path := range map[string]string{"Kind": ".spec.target.kind", "Target": ".spec.target.name", "Images": ".spec.images",
		"Phase": ".status.phase", "Batch": ".status.batch", "Batches": ".status.batches", "Updated": ".status.updated",
		"Total": ".status.total", "Verdict": ".status.analysis.verdict", "Reason": ".status.reason"} {
		if columns[name] != path {
			t.Errorf("printer column %s has jsonPath %q, want %q (columns: %v)", name, columns[name], path, columns)
		}
	}
}

// TestCRDSchemaStructural: the schemas are structural, as the apiserver requires of a v1 CRD.
func TestCRDSchemaStructural(t *testing.T) {
	for _, crd := range []*apiextensionsv1.CustomResourceDefinition{readCRD(t), readCRDFile(t, "inplacerolloutpolicies.yaml")} {
		checkStructural(t, crd)
	}
}

func checkStructural(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			t.Fatalf("version %s has no openAPIV3Schema", v.Name)
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			t.Fatalf("converting the schema of version %s: %v", v.Name, err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			t.Fatalf("version %s: the schema is not structural: %v", v.Name, err)
		}
		if errs := structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), s); len(errs) > 0 {
			t.Errorf("version %s: the schema is not structural: %v", v.Name, errs.ToAggregate())
		}
	}
}

// TestCRDSchemaMatchesTypes walks InPlaceRolloutSpec (and analysis.Config within it) and
// InPlaceRolloutStatus by their json tags and compares them with the CRD's spec and status schemas: every field is there with the type it
// decodes from, no property is there that the types lack, and each property's description is
// the field's doc comment, so that the schema and the Go types cannot drift apart.
func TestCRDSchemaMatchesTypes(t *testing.T) {
	crd := readCRD(t)
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec, ok := root.Properties["spec"]
	if !ok {
		t.Fatal("the schema has no spec property")
	}
	if !slices.Contains(root.Required, "spec") {
		t.Errorf("the schema does not require spec (required: %v)", root.Required)
	}
	status, ok := root.Properties["status"]
	if !ok {
		t.Fatal("the schema has no status property")
	}
	docs := fieldDocs(t)
	w := &walker{t: t, docs: docs}
	w.compare("spec", reflect.TypeFor[v1alpha1.InPlaceRolloutSpec](), &spec)
	w.compare("status", reflect.TypeFor[v1alpha1.InPlaceRolloutStatus](), &status)
	if w.compared < 60 {
		t.Errorf("compared %d fields; the walk stopped early", w.compared)
	}
}

// TestPolicyCRD: the InPlaceRolloutPolicy CRD is the policy's kind, namespaced, one served and
// stored version with a status subresource, and its schema is InPlaceRolloutPolicySpec and
// InPlaceRolloutPolicyStatus field for field, descriptions from their doc comments.
func TestPolicyCRD(t *testing.T) {
	crd := readCRDFile(t, "inplacerolloutpolicies.yaml")
	checks := []struct {
		what      string
		got, want any
	}{
		{"metadata.name", crd.Name, "inplacerolloutpolicies." + v1alpha1.Group},
		{"spec.group", crd.Spec.Group, v1alpha1.Group},
		{"spec.scope", crd.Spec.Scope, apiextensionsv1.NamespaceScoped},
		{"spec.names.kind", crd.Spec.Names.Kind, v1alpha1.PolicyKind},
		{"spec.names.plural", crd.Spec.Names.Plural, "inplacerolloutpolicies"},
		{"number of versions", len(crd.Spec.Versions), 1},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if len(crd.Spec.Versions) != 1 {
		return
	}
	v := crd.Spec.Versions[0]
	if v.Name != v1alpha1.Version || !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil {
		t.Errorf("version %s served %v storage %v subresources %+v, want %s served and stored, with a status subresource", v.Name, v.Served, v.Storage, v.Subresources, v1alpha1.Version)
	}
	root := v.Schema.OpenAPIV3Schema
	spec, okSpec := root.Properties["spec"]
	status, okStatus := root.Properties["status"]
	if !okSpec || !okStatus {
		t.Fatalf("the schema has no spec or no status property: %v", root.Properties)
	}
	w := &walker{t: t, docs: fieldDocs(t)}
	w.compare("spec", reflect.TypeFor[v1alpha1.InPlaceRolloutPolicySpec](), &spec)
	w.compare("status", reflect.TypeFor[v1alpha1.InPlaceRolloutPolicyStatus](), &status)
	if w.compared < 40 {
		t.Errorf("compared %d fields; the walk stopped early", w.compared)
	}
}

// walker compares Go types with schema nodes, reporting every difference by its path.
type walker struct {
	t        *testing.T
	docs     map[string]string
	compared int
}

var (
	intOrString   = reflect.TypeFor[intstr.IntOrString]()
	metaDuration  = reflect.TypeFor[metav1.Duration]()
	analysisDurat = reflect.TypeFor[analysis.Duration]()
	metaTime      = reflect.TypeFor[metav1.Time]()
	quantity      = reflect.TypeFor[resource.Quantity]()
)

func (w *walker) compare(path string, typ reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	w.t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ == intOrString:
		if !s.XIntOrString || s.Type != "" {
			w.t.Errorf("%s: want x-kubernetes-int-or-string: true and no type (a pod count or a percentage), have type %q int-or-string %v", path, s.Type, s.XIntOrString)
		}
		return
	case typ == quantity:
		// As Kubernetes' own schemas give a quantity: "250m" or 2, checked by its pattern.
		if !s.XIntOrString || s.Type != "" || s.Pattern == "" {
			w.t.Errorf("%s: a quantity wants x-kubernetes-int-or-string: true, no type and a pattern, have type %q int-or-string %v pattern %q", path, s.Type, s.XIntOrString, s.Pattern)
		}
		return
	case typ == metaTime:
		if s.Type != "string" || s.Format != "date-time" {
			w.t.Errorf("%s: a time is a string of format date-time, the schema has type %q format %q", path, s.Type, s.Format)
		}
		return
	case typ == metaDuration || typ == analysisDurat:
		if s.Type != "string" {
			w.t.Errorf("%s: a duration is a string such as \"30s\", the schema has type %q", path, s.Type)
		}
		return
	}
	switch typ.Kind() {
	case reflect.String:
		w.wantType(path, s, "string")
	case reflect.Bool:
		w.wantType(path, s, "boolean")
	case reflect.Int, reflect.Int32, reflect.Int64:
		w.wantType(path, s, "integer")
	case reflect.Float64:
		w.wantType(path, s, "number")
	case reflect.Slice:
		if w.wantType(path, s, "array") {
			if s.Items == nil || s.Items.Schema == nil {
				w.t.Errorf("%s: an array without items", path)
				return
			}
			w.compare(path+"[]", typ.Elem(), s.Items.Schema)
		}
	case reflect.Map:
		if w.wantType(path, s, "object") {
			if s.AdditionalProperties == nil || s.AdditionalProperties.Schema == nil || len(s.Properties) > 0 {
				w.t.Errorf("%s: a map wants additionalProperties and no properties", path)
				return
			}
			w.compare(path+"{}", typ.Elem(), s.AdditionalProperties.Schema)
		}
	case reflect.Struct:
		if w.wantType(path, s, "object") {
			w.compareStruct(path, typ, s)
		}
	default:
		w.t.Errorf("%s: Go kind %s is not one this test knows", path, typ.Kind())
	}
}

func (w *walker) wantType(path string, s *apiextensionsv1.JSONSchemaProps, want string) bool {
	w.t.Helper()
	if s.Type != want {
		w.t.Errorf("%s: schema type %q, want %q", path, s.Type, want)
		return false
	}
	return true
}

func (w *walker) compareStruct(path string, typ reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	w.t.Helper()
	seen := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		seen[name] = true
		fpath := path + "." + name
		prop, ok := s.Properties[name]
		if !ok {
			w.t.Errorf("%s: field %s.%s is missing from the schema", fpath, typ.Name(), f.Name)
			continue
		}
		w.compared++
		doc := w.docs[typ.PkgPath()+"."+typ.Name()+"."+f.Name]
		switch {
		case prop.Description == "":
			w.t.Errorf("%s: no description (the field's doc comment: %q)", fpath, doc)
		case doc != "" && prop.Description != doc:
			w.t.Errorf("%s: description %q, want the field's doc comment %q", fpath, prop.Description, doc)
		}
		w.compare(fpath, f.Type, &prop)
	}
	var extra []string
	for name := range s.Properties {
		if !seen[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		w.t.Errorf("%s.%s: the schema has a property that %s lacks", path, name, typ.Name())
	}
	for _, r := range s.Required {
		if !seen[r] {
			w.t.Errorf("%s: requires %q, which is not a field", path, r)
		}
	}
}

// fieldDocs parses the packages the spec's types live in and returns each struct field's doc
// comment, one line, by "importpath.Type.Field".
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	docs := map[string]string{}
	for _, pkg := range []string{"pkg/apis/v1alpha1", "analysis"} {
		dir := filepath.Join(repoRoot, filepath.FromSlash(pkg))
		fset := token.NewFileSet()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return false
				}
				for _, f := range st.Fields.List {
					if f.Doc == nil {
						continue
					}
					text := strings.Join(strings.Fields(f.Doc.Text()), " ")
					for _, name := range f.Names {
						docs[module+pkg+"."+ts.Name.Name+"."+name.Name] = text
					}
				}
				return false
			})
		}
	}
	if len(docs) == 0 {
		t.Fatal("no field doc comments found")
	}
	return docs
}

// TestCRDQuantities: the schema takes a quantity as the API server takes a container's, a string
// or an integer, and refuses at apply time one the rollout could not read, naming its field.
func TestCRDQuantities(t *testing.T) {
	tests := []struct {
		name      string
		resources string
		want      string // empty: accepted
	}{
		{"cpu and memory", `{app: {requests: {cpu: 200m, memory: 64Mi}, limits: {cpu: "1", memory: 128Mi}}}`, ""},
		{"an integer", `{app: {limits: {cpu: 2}}}`, ""},
		{"an exponent", `{app: {requests: {memory: 1e9}}}`, ""},
		{"a fraction as a string", `{app: {limits: {cpu: "0.5"}}}`, ""},
		// As in every CRD that takes a quantity: YAML's 0.5 is a number, neither an integer nor a
		// string.
		{"a fraction as a number", `{app: {limits: {cpu: 0.5}}}`, "spec.resources.app.limits.cpu"},
		{"not a quantity", `{app: {requests: {cpu: lots}}}`, "spec.resources.app.requests.cpu"},
		{"a unit of its own", `{app: {limits: {memory: 64MB}}}`, "spec.resources.app.limits.memory"},
		{"not a map", `{app: {requests: [cpu]}}`, "spec.resources.app.requests"},
	}
	validate := specValidator(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkSchemaVerdict(t, validate(t, "resources", tt.resources), tt.want)
		})
	}
}

// specValidator returns a function that validates, against the CRD's schema as OpenAPI (which
// the API server's validation of a custom resource runs), an InPlaceRollout of a StatefulSet
// whose spec has field set to value (YAML), and returns the errors.
func specValidator(t *testing.T) func(t *testing.T, field, value string) []string {
	t.Helper()
	raw, err := json.Marshal(readCRD(t).Spec.Versions[0].Schema.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	var schema spec.Schema
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	validator := validate.NewSchemaValidator(&schema, nil, "", strfmt.Default)
	return func(t *testing.T, field, value string) []string {
		t.Helper()
		var v any
		if err := yaml.Unmarshal([]byte(value), &v); err != nil {
			t.Fatal(err)
		}
		obj := map[string]any{"apiVersion": v1alpha1.APIVersion, "kind": v1alpha1.Kind, "metadata": map[string]any{"name": "r"},
			"spec": map[string]any{"target": map[string]any{"kind": "StatefulSet", "name": "web"}, field: v}}
		var got []string
		for _, e := range validator.Validate(obj).Errors {
			got = append(got, e.Error())
		}
		return got
	}
}

// checkSchemaVerdict fails the test unless the schema's errors are none when want is empty, or
// one of them names want.
func checkSchemaVerdict(t *testing.T, got []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(got) > 0:
		t.Errorf("refused: %v", got)
	case want != "" && !strings.Contains(strings.Join(got, "\n"), want):
		t.Errorf("errors %q, want one naming %q", got, want)
	}
}

// TestCRDHooks: the schema takes hooks as the rollout reads them, and refuses at apply time,
// naming the field, what it can tell the rollout would refuse. (That a hook takes exactly one of
// http and handshake is a CEL rule, which the API server runs and this validator does not.)
func TestCRDHooks(t *testing.T) {
	tests := []struct {
		name  string
		hooks string
		want  string // empty: accepted
	}{
		{"http by number", `{preUpdate: {http: {port: 8080, path: /hook/pre, method: POST, expectStatus: 204}, timeout: 10s, onFailure: Fail}}`, ""},
		{"http by port name", `{postUpdate: {http: {port: http, path: /ready}}}`, ""},
		{"handshake", `{preUpdate: {handshake: {condition: example.com/deregistered}, timeout: 5m, onFailure: Continue}}`, ""},
		{"no path", `{preUpdate: {http: {port: 8080}}}`, "spec.hooks.preUpdate.http.path"},
		{"a path without /", `{preUpdate: {http: {port: 8080, path: hook}}}`, "spec.hooks.preUpdate.http.path"},
		{"a path with a query", `{preUpdate: {http: {port: 8080, path: "/hook?x=1"}}}`, "spec.hooks.preUpdate.http.path"},
		{"another method", `{postUpdate: {http: {port: 8080, path: /h, method: PUT}}}`, "spec.hooks.postUpdate.http.method"},
		{"a status out of range", `{postUpdate: {http: {port: 8080, path: /h, expectStatus: 600}}}`, "spec.hooks.postUpdate.http.expectStatus"},
		{"a port neither number nor name", `{preUpdate: {http: {port: [8080], path: /h}}}`, "spec.hooks.preUpdate.http.port"},
		{"an unknown onFailure", `{preUpdate: {handshake: {condition: example.com/x}, onFailure: Ignore}}`, "spec.hooks.preUpdate.onFailure"},
		{"a handshake without condition", `{preUpdate: {handshake: {}}}`, "spec.hooks.preUpdate.handshake.condition"},
		{"a timeout not a string", `{preUpdate: {handshake: {condition: example.com/x}, timeout: 30}}`, "spec.hooks.preUpdate.timeout"},
	}
	validate := specValidator(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkSchemaVerdict(t, validate(t, "hooks", tt.hooks), tt.want)
		})
	}
}
