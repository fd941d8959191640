package cluster

import (
	"io"
	"net/http"
	"testing"
)

// Scrape returns the body of a GET of url (a /metrics endpoint, say), failing t unless it
// answers 200.
func Scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v: %s", url, resp.Status, err, body)
	}
	return string(body)
}
