// Package strictdecode decodes YAML or JSON into a Go value strictly: a field the type lacks, or a
// value of the wrong type, is an error that names the field by its path (spec.batches[1],
// checks.latency.quantil), so a person can find the mistake in their file.
package strictdecode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// ErrEmpty is returned for a document that holds nothing (empty, or null).
var ErrEmpty = errors.New("the document is empty")

// Option changes how Decode reports mistakes.
type Option func(*decoder)

// Describe names what a value of v's type must be, e.g. `a duration such as "30s"`, for the
// types that decode themselves: a value they refuse is then reported as "PATH: want WHAT, got
// VALUE" instead of with their own decoder's words.
func Describe(v any, what string) Option {
	return func(d *decoder) { d.describe[reflect.TypeOf(v)] = what }
}

// DescribeField names what one field of a struct must be, by the struct (a value of its type)
// and the field's JSON name, over Describe of the field's type: for a type that serves fields
// of different meanings, such as an int-or-string that is a pod count in one place and a port
// in another.
func DescribeField(parent any, field, what string) Option {
	return func(d *decoder) { d.fields[fieldKey{reflect.TypeOf(parent), field}] = what }
}

// fieldKey names a field by its struct type and JSON name.
type fieldKey struct {
	parent reflect.Type
	field  string
}

type decoder struct {
	describe map[reflect.Type]string
	fields   map[fieldKey]string
}

// Decode decodes data, YAML or JSON, into the value into points to.
func Decode(data []byte, into any, opts ...Option) error {
	d := &decoder{describe: map[reflect.Type]string{}, fields: map[fieldKey]string{}}
	for _, o := range opts {
		o(d)
	}
	// JSON goes to the JSON decoder as it is; YAML is converted first. (YAML would also read
	// JSON, but rejects some characters JSON allows in strings.)
	j := bytes.TrimSpace(data)
	if !json.Valid(j) {
		var err error
		if j, err = yaml.YAMLToJSON(data); err != nil {
			return err
		}
	}
	if t := bytes.TrimSpace(j); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return ErrEmpty
	}
	var raw any
	if err := json.Unmarshal(j, &raw); err != nil {
		return err
	}
	if err := d.check(raw, reflect.TypeOf(into), "", ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return fmt.Errorf("a %s cannot hold %s", te.Type, te.Value)
			}
			return fmt.Errorf("%s: a %s cannot hold %s", te.Field, te.Type, te.Value)
		}
		return err
	}
	return nil
}

var unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// check walks decoded JSON against a type and reports, by its path, the first key the type
// lacks, or the first value a type with its own JSON decoding (a duration, a count or
// percentage) refuses: the JSON decoder would report those without saying where they are. what,
// when not empty, is the field's own description (DescribeField).
func (d *decoder) check(v any, t reflect.Type, path, what string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		if v == nil {
			return nil
		}
		raw, _ := json.Marshal(v)
		if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			if what == "" {
				what = d.describe[t]
			}
			if what != "" {
				return fmt.Errorf("%s: want %s, got %s", path, what, raw)
			}
			return fmt.Errorf("%s: %v", path, err)
		}
		return nil
	}
	switch val := v.(type) {
	case map[string]any:
		if t.Kind() == reflect.Map {
			for _, k := range slices.Sorted(maps.Keys(val)) {
				if err := d.check(val[k], t.Elem(), join(path, k), what); err != nil {
					return err
				}
			}
			return nil
		}
		if t.Kind() != reflect.Struct {
			return nil // the decoder reports the type mismatch
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(val)) {
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("unknown field %q (known fields here: %s)", join(path, k), strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
			}
			if err := d.check(val[k], ft.typ, join(path, k), d.fields[fieldKey{ft.owner, k}]); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() == reflect.Slice {
			for i, sub := range val {
				if err := d.check(sub, t.Elem(), fmt.Sprintf("%s[%d]", path, i), what); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonField is a field of a struct as JSON names it: its type, and the struct that declares it
// (an embedded struct's, for a promoted field), which DescribeField names it by.
type jsonField struct {
	typ, owner reflect.Type
}

// jsonFields maps the JSON names of a struct's fields to their types, taking the fields of
// embedded structs without a name of their own (`json:",inline"`) as the struct's own.
func jsonFields(t reflect.Type) map[string]jsonField {
	fields := map[string]jsonField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct:
			// encoding/json promotes the fields of an embedded struct, exported or not.
			for n, ft := range jsonFields(f.Type) {
				fields[n] = ft
			}
		case !f.IsExported():
		case name == "":
			fields[f.Name] = jsonField{f.Type, t}
		default:
			fields[name] = jsonField{f.Type, t}
		}
	}
	return fields
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
