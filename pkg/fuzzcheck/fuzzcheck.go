// Package fuzzcheck holds the properties the fuzz targets of every decoder share: an error
// never repeats a credential the input carried.
package fuzzcheck

import (
	"bytes"
	"net/url"
	"slices"
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
	var out []string
	for _, s := range inlineSecrets(data) {
		if len(s) >= minSecret && strings.Count(string(data), s) == 1 {
			out = append(out, s)
		}
	}
	return out
}

// inlineSecrets returns every credential data carries inline, however short or often repeated.
func inlineSecrets(data []byte) []string {
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
	return found
}

// Leak returns the credential of data that msg repeats because data carries it, if any. msg is
// the message the decoder under test gave for data, and message gives its message for any other
// input ("" when it accepts it). A credential found in msg is a leak only when msg repeats it
// more often than the message for the same input with another value in the credential's place
// does: the decoder writes its own words and field names (a list of known fields, a field path),
// and a credential that happens to be part of them, such as "cret" in bearerTokenSecret, is not
// one the message repeats. When no other value can stand in for the credential with the input
// read the same, every repetition counts.
func Leak(msg string, data []byte, message func([]byte) string) (string, bool) {
	for _, s := range SecretValues(data) {
		n := strings.Count(msg, s)
		if n == 0 {
			continue
		}
		if other, ok := standIn(data, s); ok && strings.Count(message(other), s) >= n {
			continue
		}
		return s, true
	}
	return "", false
}

// standIn returns data with its credential s replaced by a value of the same length and the same
// kinds of character (letters rotated by 13, digits by 5), so that YAML and an address read the
// input alike; false when no such value exists or the input no longer reads the same with it:
// s is not the credential's spelling in data (an escaped JSON string), or the new value reads as
// another type.
func standIn(data []byte, s string) ([]byte, bool) {
	r := []rune(s)
	for i, c := range r {
		switch {
		case 'a' <= c && c <= 'z':
			r[i] = 'a' + (c-'a'+13)%26
		case 'A' <= c && c <= 'Z':
			r[i] = 'A' + (c-'A'+13)%26
		case '0' <= c && c <= '9':
			r[i] = '0' + (c-'0'+5)%10
		}
	}
	v := string(r)
	if v == s {
		return nil, false
	}
	other := bytes.Replace(data, []byte(s), []byte(v), 1)
	secrets := inlineSecrets(other)
	if bytes.Contains(other, []byte(s)) || !slices.Contains(secrets, v) || slices.Contains(secrets, s) {
		return nil, false
	}
	return other, true
}

// NoSecretIn fails t when msg, the message the decoder under test gave for data, repeats a
// credential of data (see Leak); message gives the decoder's message for another input.
func NoSecretIn(t testing.TB, msg string, data []byte, message func([]byte) string) {
	t.Helper()
	if s, ok := Leak(msg, data, message); ok {
		t.Fatalf("the message repeats the credential %q given in the input: %s", s, msg)
	}
}

// Message returns err's message, "" for nil: a message function for Leak and NoSecretIn.
func Message(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
