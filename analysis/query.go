package analysis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
)

// Querier runs instant PromQL queries.
type Querier interface {
	// Query returns the query's value; ok is false when the result is empty or NaN.
	Query(ctx context.Context, query string) (value float64, ok bool, err error)
}

// Client queries the Prometheus HTTP API through client_golang.
type Client struct {
	address string
	api     promv1.API
	timeout time.Duration
	queries atomic.Int64
}

// NewClient builds a client from the prometheus section of a configuration. address overrides
// the configured one when not empty.
func NewClient(p Prometheus, address string) (*Client, error) {
	if address == "" {
		address = p.Address
	}
	if address == "" {
		return nil, errors.New("no Prometheus address: give --prometheus or prometheus.address in the analysis config")
	}
	// Checked again here, whatever the caller validated: every error of the client names its
	// address, so the address must hold no password.
	if err := CheckAddress(address); err != nil {
		return nil, fmt.Errorf("prometheus address: %w", err)
	}
	hc := promconfig.HTTPClientConfig{BearerTokenFile: p.BearerTokenFile, FollowRedirects: true, EnableHTTP2: true}
	if b := p.BasicAuth; b != nil {
		hc.BasicAuth = &promconfig.BasicAuth{Username: b.Username, Password: promconfig.Secret(b.Password), PasswordFile: b.PasswordFile}
	}
	if t := p.TLS; t != nil {
		hc.TLSConfig = promconfig.TLSConfig{CAFile: t.CAFile, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	if len(p.Headers) > 0 {
		hc.HTTPHeaders = &promconfig.Headers{Headers: map[string]promconfig.Header{}}
		for k, v := range p.Headers {
			// As secrets: header values often carry credentials.
			hc.HTTPHeaders.Headers[k] = promconfig.Header{Secrets: []promconfig.Secret{promconfig.Secret(v)}}
		}
	}
	if err := hc.Validate(); err != nil {
		return nil, fmt.Errorf("prometheus client settings: %w", err)
	}
	rt, err := promconfig.NewRoundTripperFromConfig(hc, "inplace-rollout")
	if err != nil {
		return nil, fmt.Errorf("prometheus client settings: %w", err)
	}
	c, err := promapi.NewClient(promapi.Config{Address: address, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus address %s: %w", shownAddress(address), err)
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = Duration(DefaultTimeout)
	}
	return &Client{address: address, api: promv1.NewAPI(c), timeout: time.Duration(timeout)}, nil
}

// Queries returns how many queries the client sent.
func (c *Client) Queries() int64 { return c.queries.Load() }

// Query runs an instant query now. A vector gives its first sample, a scalar its value; an
// empty vector or NaN is no data (ok false); any other result type is an error. Errors name the
// address and, for HTTP errors, the status.
func (c *Client) Query(ctx context.Context, query string) (float64, bool, error) {
	c.queries.Add(1)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, _, err := c.api.Query(ctx, query, time.Now())
	if err != nil {
		return 0, false, c.describe(err)
	}
	var v float64
	switch r := res.(type) {
	case model.Vector:
		if len(r) == 0 {
			return 0, false, nil
		}
		v = float64(r[0].Value)
	case *model.Scalar:
		v = float64(r.Value)
	default:
		return 0, false, fmt.Errorf("prometheus at %s: query returned a %s; want a vector or a scalar", c.address, res.Type())
	}
	if math.IsNaN(v) {
		return 0, false, nil
	}
	return v, true, nil
}

// describe turns a client_golang error into one that names the address and HTTP status, and
// carries no request headers (which hold credentials).
func (c *Client) describe(err error) error {
	var perr *promv1.Error
	if errors.As(err, &perr) {
		status := ""
		switch perr.Type {
		case promv1.ErrClient, promv1.ErrServer:
			status = " (" + perr.Msg + ")"
		}
		if code := httpStatus(perr); code != 0 {
			status = fmt.Sprintf(" (HTTP %d %s)", code, http.StatusText(code))
		}
		msg := perr.Msg
		if code := httpStatus(perr); code != 0 {
			msg = ""
		}
		detail := strings.TrimSpace(strings.Join([]string{msg, firstLine(perr.Detail)}, " "))
		return fmt.Errorf("prometheus at %s: %s%s: %s", c.address, perr.Type, status, detail)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("prometheus at %s: no answer within %s", c.address, c.timeout)
	}
	return fmt.Errorf("prometheus at %s: %w", c.address, err)
}

// httpStatus extracts the status code client_golang puts in the message of client and server
// errors ("client error: 401").
func httpStatus(e *promv1.Error) int {
	var code int
	if _, err := fmt.Sscanf(e.Msg, "client error: %d", &code); err == nil {
		return code
	}
	if _, err := fmt.Sscanf(e.Msg, "server error: %d", &code); err == nil {
		return code
	}
	return 0
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	if len(s) > 200 {
		return s[:200]
	}
	return s
}
