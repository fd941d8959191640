// Package loadgen sends HTTP traffic from the host to the pods of the real node, whose IPs sit
// on a local bridge the host reaches directly, so that their metrics carry real requests for
// the analysis to judge. It counts the answers by status code and by body (the app answers its
// image tag), which tells a test which image served.
//
// Safety: traffic never leaves the machine. A target must be an IPv4 address inside the
// caller's bridge subnet, and that subnet must be private (10/8, 172.16/12, 192.168/16) or
// loopback (127/8, for tests); anything else is refused, checked again when dialling, and no
// proxy or redirect is followed.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Config.
const (
	DefaultPort    = 8080
	DefaultPath    = "/"
	DefaultRefresh = time.Second
	// Timeout bounds each request, connection included: a container being replaced is an
	// error soon, not a stall.
	Timeout = time.Second
	// MaxRPS is the highest rate Start accepts.
	MaxRPS = 1000
)

// maxBody is how much of an answer's body is kept as its key in Stats.Bodies.
const maxBody = 64

// allowedRanges are the only address ranges a subnet may lie in.
var allowedRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("127.0.0.0/8"),
}

// Config says where and how fast to send traffic.
type Config struct {
	// Subnet is the bridge's subnet, e.g. 10.233.77.0/24; targets outside it are refused.
	// Required.
	Subnet netip.Prefix
	// Targets returns the current targets: pod IPs ("10.233.77.5", sent to Port) or IP:PORT.
	// It is called at Start and then every Refresh, never twice at once, so pods' new IPs are
	// picked up; a slow call delays only the next refresh. Required.
	Targets func() []string
	// RPS is the number of requests per second over all targets, spread over them in turn;
	// 1 to MaxRPS.
	RPS int
	// Port is the targets' port when they name none [DefaultPort].
	Port int
	// Path is the path requested [DefaultPath].
	Path string
	// Refresh is how often Targets is called [DefaultRefresh].
	Refresh time.Duration
}

// Stats are the counts so far.
type Stats struct {
	// Sent is the number of requests sent.
	Sent int
	// Codes counts the answers by HTTP status code.
	Codes map[int]int
	// Bodies counts the answers by body, space-trimmed and cut to 64 bytes: the app answers
	// its image tag.
	Bodies map[string]int
	// Errors counts the requests with no answer: refused, reset or timed out.
	Errors int
	// Refused lists, sorted, every target refused because it is not an IPv4 address in the
	// subnet; none of them was sent anything.
	Refused []string
}

// Generator sends traffic until Stop.
type Generator struct {
	cfg    Config
	client *http.Client
	cancel context.CancelFunc
	loops  sync.WaitGroup // the sending and refreshing loops
	sends  sync.WaitGroup // requests in flight
	stop   sync.Once

	mu      sync.Mutex
	targets []netip.AddrPort
	next    int
	stats   Stats
	refused map[string]bool
}

// Start checks cfg, reads the targets once and sends traffic until Stop or the end of ctx.
func Start(ctx context.Context, cfg Config) (*Generator, error) {
	if err := checkSubnet(cfg.Subnet); err != nil {
		return nil, fmt.Errorf("starting the load generator: %w", err)
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if cfg.Targets == nil {
		return nil, errors.New("starting the load generator: no Targets function")
	}
	if cfg.RPS < 1 || cfg.RPS > MaxRPS {
		return nil, fmt.Errorf("starting the load generator: %d requests per second is not between 1 and %d", cfg.RPS, MaxRPS)
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("starting the load generator: port %d is out of range", cfg.Port)
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if !strings.HasPrefix(cfg.Path, "/") {
		return nil, fmt.Errorf("starting the load generator: path %q does not start with /", cfg.Path)
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	g := &Generator{
		cfg:     cfg,
		client:  newClient(cfg.Subnet),
		stats:   Stats{Codes: map[int]int{}, Bodies: map[string]int{}},
		refused: map[string]bool{},
	}
	ctx, g.cancel = context.WithCancel(ctx)
	g.refresh()
	g.loops.Add(2)
	go g.refreshLoop(ctx)
	go g.sendLoop(ctx)
	return g, nil
}

// checkSubnet accepts a valid IPv4 prefix that lies inside one of allowedRanges.
func checkSubnet(p netip.Prefix) error {
	if !p.IsValid() || !p.Addr().Is4() {
		return fmt.Errorf("subnet %s is not an IPv4 prefix", p)
	}
	for _, r := range allowedRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return nil
		}
	}
	return fmt.Errorf("subnet %s is not private (10/8, 172.16/12, 192.168/16) or loopback (127/8): traffic must stay on this machine", p)
}

// newClient makes a client that only ever connects to an address in subnet, directly, once
// per request.
func newClient(subnet netip.Prefix) *http.Client {
	dialer := &net.Dialer{
		Timeout: Timeout,
		// The targets were checked already; this check holds for whatever the transport dials.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !ap.Addr().Is4() || !subnet.Contains(ap.Addr()) {
				return fmt.Errorf("refusing to connect to %s: not in the subnet %s", address, subnet)
			}
			return nil
		},
	}
	return &http.Client{
		Timeout: Timeout,
		Transport: &http.Transport{
			Proxy:             nil,
			DialContext:       dialer.DialContext,
			DisableKeepAlives: true, // a restarted container's new listener gets the next request
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// refresh reads the targets, keeping those in the subnet and noting the others as refused.
func (g *Generator) refresh() {
	raw := g.cfg.Targets()
	var ok []netip.AddrPort
	var refused []string
	for _, t := range raw {
		ap, err := g.parse(t)
		if err != nil {
			refused = append(refused, t)
			continue
		}
		ok = append(ok, ap)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.targets = ok
	for _, t := range refused {
		if !g.refused[t] {
			g.refused[t] = true
			g.stats.Refused = append(g.stats.Refused, t)
		}
	}
	sort.Strings(g.stats.Refused)
}

// parse reads a target as IP or IP:PORT and refuses one outside the subnet.
func (g *Generator) parse(target string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		addr, err := netip.ParseAddr(target)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("target %q is not an IP address or IP:PORT", target)
		}
		ap = netip.AddrPortFrom(addr, uint16(g.cfg.Port))
	}
	if !ap.Addr().Is4() || !g.cfg.Subnet.Contains(ap.Addr()) {
		return netip.AddrPort{}, fmt.Errorf("target %s is not an IPv4 address in %s", target, g.cfg.Subnet)
	}
	return ap, nil
}

func (g *Generator) refreshLoop(ctx context.Context) {
	defer g.loops.Done()
	tick := time.NewTicker(g.cfg.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			g.refresh()
		}
	}
}

func (g *Generator) sendLoop(ctx context.Context) {
	defer g.loops.Done()
	tick := time.NewTicker(time.Second / time.Duration(g.cfg.RPS))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		target, ok := g.pick()
		if !ok {
			continue
		}
		g.sends.Add(1)
		go func() {
			defer g.sends.Done()
			g.send(target)
		}()
	}
}

// pick takes the next target in turn.
func (g *Generator) pick() (netip.AddrPort, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.targets) == 0 {
		return netip.AddrPort{}, false
	}
	t := g.targets[g.next%len(g.targets)]
	g.next++
	g.stats.Sent++
	return t, true
}

// send makes one request. It does not take the generator's context: a request under way when
// Stop is called ends by its own timeout, so that stopping counts no false errors.
func (g *Generator) send(target netip.AddrPort) {
	url := "http://" + target.String() + g.cfg.Path
	resp, err := g.client.Get(url)
	if err != nil {
		g.mu.Lock()
		g.stats.Errors++
		g.mu.Unlock()
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.stats.Errors++
		return
	}
	g.stats.Codes[resp.StatusCode]++
	g.stats.Bodies[strings.TrimSpace(string(body))]++
}

// Stats returns the counts so far.
func (g *Generator) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Stats{Sent: g.stats.Sent, Errors: g.stats.Errors, Codes: map[int]int{}, Bodies: map[string]int{}}
	for k, v := range g.stats.Codes {
		s.Codes[k] = v
	}
	for k, v := range g.stats.Bodies {
		s.Bodies[k] = v
	}
	s.Refused = append([]string(nil), g.stats.Refused...)
	return s
}

// Stop ends the traffic, waits for the requests under way (at most Timeout) and returns the
// final counts. Calling it again returns them again.
func (g *Generator) Stop() Stats {
	g.stop.Do(func() {
		g.cancel()
		g.loops.Wait()
		g.sends.Wait()
	})
	return g.Stats()
}

// String sums the counts up in one line, for logs.
func (s Stats) String() string {
	codes := make([]int, 0, len(s.Codes))
	for c := range s.Codes {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d", s.Sent)
	for _, c := range codes {
		b.WriteString(", " + strconv.Itoa(c) + ": " + strconv.Itoa(s.Codes[c]))
	}
	fmt.Fprintf(&b, ", errors %d", s.Errors)
	if len(s.Refused) > 0 {
		fmt.Fprintf(&b, ", refused %s", strings.Join(s.Refused, " "))
	}
	return b.String()
}
