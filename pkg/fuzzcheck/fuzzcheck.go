// Package fuzzcheck holds the properties the fuzz targets of every decoder share: an error
// never repeats a credential the input carried.
package fuzzcheck

import (
	"net/url"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// secretKeys are the fields whose values are credentials given inline.
var secretKeys = map[string]bool{"password": true, "bearerToken": true, "token": true}

// minSecret is the shortest value checked: a shorter one turns up in any message by chance.
const minSecret = 4

// SecretValues returns the credentials data (YAML or JSON) carries inline: the values of
// password and token fields at any depth, and the password of an address's user info. Only
// values that appear once in data are returned, so that a message quoting another part of the
// input is not mistaken for one quoting the credential.
func SecretValues(data []byte) []string {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil
	}
	var found []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok {
					if secretKeys[k] {
						found = append(found, s)
					}
					if u, err := url.Parse(s); err == nil && u.User != nil {
						if pw, ok := u.User.Password(); ok {
							found = append(found, pw)
						}
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	var out []string
	for _, s := range found {
		if len(s) >= minSecret && strings.Count(string(data), s) == 1 {
			out = append(out, s)
		}
	}
	return out
}

// NoSecretIn fails t when msg repeats a credential of data.
func NoSecretIn(t *testing.T, msg string, data []byte) {
	t.Helper()
	for _, s := range SecretValues(data) {
		if strings.Contains(msg, s) {
			t.Fatalf("the message repeats the credential %q given in the input: %s", s, msg)
		}
	}
}
