package loadgen

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inplace-rollout/inplace-rollout/test/integration/realnode/images"
)

// programs are the compiled binaries: the tests send traffic to the real app.
var programs *images.Programs

func TestMain(m *testing.M) {
	os.Exit(images.RunTests(m, &programs))
}

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// startApp runs the app for tag on loopback, with env added to its environment, until the end
// of the test.
func startApp(t *testing.T, tag string, env ...string) *images.LocalApp {
	t.Helper()
	a, err := programs.StartApp(context.Background(), tag, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if code, err := a.Stop(); err != nil || code != 0 {
			t.Errorf("stopping the app %s: exit %d, %v\n%s", tag, code, err, a.Log())
		}
	})
	return a
}

// start runs a generator until the end of the test.
func start(t *testing.T, cfg Config) *Generator {
	t.Helper()
	g, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Stop() })
	return g
}

// waitFor polls the generator's counts until ok says they are enough, for at most 10 s.
func waitFor(t *testing.T, g *Generator, what string, ok func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(g.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s: %s", what, g.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCountsAnswersByCodeAndBody sends traffic to a healthy and an erroring app and counts
// what each answered.
func TestCountsAnswersByCodeAndBody(t *testing.T) {
	v1, errs := startApp(t, "v1"), startApp(t, "errors1", "APP_ERROR_SHARE=1")
	g := start(t, Config{
		Subnet:  loopback,
		Targets: func() []string { return []string{v1.Addr, errs.Addr} },
		RPS:     50,
	})
	waitFor(t, g, "answers from both apps", func(s Stats) bool { return s.Bodies["v1"] >= 5 && s.Bodies["errors1"] >= 5 })
	s := g.Stop()
	if s.Codes[200] != s.Bodies["v1"] || s.Codes[500] != s.Bodies["errors1"] {
		t.Errorf("codes %v, bodies %v: want the v1 app's answers 200 and the errors1 app's 500", s.Codes, s.Bodies)
	}
	if s.Errors != 0 || len(s.Refused) != 0 {
		t.Errorf("%s: want no errors and nothing refused", s)
	}
	if s.Sent != s.Codes[200]+s.Codes[500] {
		t.Errorf("%s: after Stop, every request sent should be answered", s)
	}
	if again := g.Stats(); again.Sent != s.Sent {
		t.Errorf("still sending after Stop: %s, then %s", s, again)
	}
}

// TestFollowsTheTargets swaps the targets while running: the traffic moves to the new ones.
func TestFollowsTheTargets(t *testing.T) {
	v1, v2 := startApp(t, "v1"), startApp(t, "v2")
	var current atomic.Pointer[string]
	current.Store(&v1.Addr)
	g := start(t, Config{
		Subnet:  loopback,
		Targets: func() []string { return []string{*current.Load()} },
		RPS:     50,
		Refresh: 50 * time.Millisecond,
	})
	waitFor(t, g, "answers from v1", func(s Stats) bool { return s.Bodies["v1"] >= 3 })
	current.Store(&v2.Addr)
	waitFor(t, g, "answers from v2", func(s Stats) bool { return s.Bodies["v2"] >= 3 })
}

// TestCountsErrors sends traffic to a port where nothing listens.
func TestCountsErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	g := start(t, Config{Subnet: loopback, Targets: func() []string { return []string{closed} }, RPS: 50})
	waitFor(t, g, "errors", func(s Stats) bool { return s.Errors >= 3 })
	if s := g.Stop(); len(s.Codes) != 0 {
		t.Errorf("%s: answers from a closed port", s)
	}
}

// TestRefusesTargetsOutsideTheSubnet gives targets that are public, in another subnet, not
// IPv4 or not addresses: none gets a request, and each is reported.
func TestRefusesTargetsOutsideTheSubnet(t *testing.T) {
	app := startApp(t, "v1")
	targets := []string{
		"8.8.8.8", "1.1.1.1:80", "10.233.78.5", "192.168.1.1", "::1", "[::ffff:10.233.77.5]:8080",
		"10.233.77.300", "example.com", app.Addr, // a real listener, on loopback, outside the bridge
	}
	g := start(t, Config{
		Subnet:  netip.MustParsePrefix("10.233.77.0/24"),
		Targets: func() []string { return targets },
		RPS:     100,
	})
	time.Sleep(200 * time.Millisecond)
	s := g.Stop()
	if s.Sent != 0 || len(s.Codes) != 0 || s.Errors != 0 {
		t.Errorf("%s: want nothing sent", s)
	}
	want := slices.Clone(targets)
	slices.Sort(want)
	if !slices.Equal(s.Refused, want) {
		t.Errorf("refused %q, want %q", s.Refused, want)
	}
}

// TestStartRefusesConfigs checks the subnet rule and the other limits of Config.
func TestStartRefusesConfigs(t *testing.T) {
	targets := func() []string { return nil }
	tests := []struct {
		name string
		cfg  Config
	}{
		{"everything", Config{Subnet: netip.MustParsePrefix("0.0.0.0/0"), Targets: targets, RPS: 1}},
		{"public", Config{Subnet: netip.MustParsePrefix("8.8.8.0/24"), Targets: targets, RPS: 1}},
		{"wider than 10/8", Config{Subnet: netip.MustParsePrefix("10.0.0.0/7"), Targets: targets, RPS: 1}},
		{"beside 172.16/12", Config{Subnet: netip.MustParsePrefix("172.32.0.0/16"), Targets: targets, RPS: 1}},
		{"IPv6", Config{Subnet: netip.MustParsePrefix("::1/128"), Targets: targets, RPS: 1}},
		{"no subnet", Config{Targets: targets, RPS: 1}},
		{"no targets", Config{Subnet: loopback, RPS: 1}},
		{"no rate", Config{Subnet: loopback, Targets: targets}},
		{"too fast", Config{Subnet: loopback, Targets: targets, RPS: MaxRPS + 1}},
		{"bad port", Config{Subnet: loopback, Targets: targets, RPS: 1, Port: 70000}},
		{"bad path", Config{Subnet: loopback, Targets: targets, RPS: 1, Path: "healthz"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if g, err := Start(t.Context(), tt.cfg); err == nil {
				g.Stop()
				t.Errorf("Start(%+v) accepted", tt.cfg)
			}
		})
	}
	for _, subnet := range []string{"10.233.77.0/24", "172.16.5.0/24", "192.168.0.0/16", "127.0.0.1/32"} {
		t.Run("accepts "+subnet, func(t *testing.T) {
			g, err := Start(t.Context(), Config{Subnet: netip.MustParsePrefix(subnet), Targets: targets, RPS: 1})
			if err != nil {
				t.Fatal(err)
			}
			g.Stop()
		})
	}
}

// TestClientDialsOnlyIntoTheSubnet checks the second line of defence on its own: the client
// refuses to connect outside the subnet whatever URL it is given.
func TestClientDialsOnlyIntoTheSubnet(t *testing.T) {
	app := startApp(t, "v1")
	tests := []struct {
		subnet string
		ok     bool
	}{
		{"10.233.77.0/24", false},
		{"127.0.0.0/8", true},
	}
	for _, tt := range tests {
		t.Run(tt.subnet, func(t *testing.T) {
			resp, err := newClient(netip.MustParsePrefix(tt.subnet)).Get("http://" + app.Addr + "/")
			if err == nil {
				resp.Body.Close()
			}
			if (err == nil) != tt.ok {
				t.Errorf("GET %s with the subnet %s: %v, want success %v", app.Addr, tt.subnet, err, tt.ok)
			}
		})
	}
}
