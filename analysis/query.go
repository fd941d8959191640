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
	// Query returns the query's value; ok is false when the result is empty or NaN. A result
	// of more than one series is an error, never its first series: the built-in checks judge
	// one number, and a pod that fails must not hide behind one that passes.
	Query(ctx context.Context, query string) (value float64, ok bool, err error)
}

// Series is one sample of an instant query's result.
type Series struct {
	// Labels of the series; none for a scalar.
	Labels map[string]string
	Value  float64
}

// SeriesQuerier is a Querier that also returns every series of a result. Custom checks judge
// each series through it; through a plain Querier they judge the one value of Query.
type SeriesQuerier interface {
	Querier
	// QuerySeries returns every sample of the result, NaN ones included; a scalar is one
	// series without labels, an empty vector none.
	QuerySeries(ctx context.Context, query string) ([]Series, error)
}

// Client queries the Prometheus HTTP API through client_golang.
type Client struct {
	address string
	api     promv1.API
	timeout time.Duration
	queries atomic.Int64
}

// NewClient builds a client from the prometheus section of a configuration. address overrides
// the configured one when not empty. A configuration that names Secrets needs their values:
// use NewClientWith.
func NewClient(p Prometheus, address string) (*Client, error) {
	return NewClientWith(p, address, Credentials{})
}

// NewClientWith is NewClient with the values of the Secret keys the configuration names.
func NewClientWith(p Prometheus, address string, creds Credentials) (*Client, error) {
	if address == "" {
		address = p.Address
	}
	if address == "" {
		return nil, errors.New("no Prometheus address: give prometheus.address in the analysis config")
	}
	// Checked again here, whatever the caller validated: every error of the client names its
	// address, so the address must hold no password.
	if err := CheckAddress(address); err != nil {
		return nil, fmt.Errorf("prometheus address: %w", err)
	}
	hc := promconfig.HTTPClientConfig{BearerTokenFile: p.BearerTokenFile, FollowRedirects: true, EnableHTTP2: true}
	if p.BearerTokenSecret != nil {
		hc.BearerToken = promconfig.Secret(creds.BearerToken)
	}
	if b := p.BasicAuth; b != nil {
		hc.BasicAuth = &promconfig.BasicAuth{Username: b.Username, Password: promconfig.Secret(b.Password), PasswordFile: b.PasswordFile}
		if b.PasswordSecret != nil {
			hc.BasicAuth.Password = promconfig.Secret(creds.Password)
		}
	}
	if t := p.TLS; t != nil {
		hc.TLSConfig = promconfig.TLSConfig{CAFile: t.CAFile, InsecureSkipVerify: t.InsecureSkipVerify}
		if t.CASecret != nil {
			hc.TLSConfig.CA = creds.CA
		}
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

// Query runs an instant query now. A vector of one series gives its value, a scalar its value;
// an empty vector or NaN is no data (ok false); a vector of several series, or any other result
// type, is an error. Errors name the address and, for HTTP errors, the status.
func (c *Client) Query(ctx context.Context, query string) (float64, bool, error) {
	series, err := c.QuerySeries(ctx, query)
	switch {
	case err != nil:
		return 0, false, err
	case len(series) == 0:
		return 0, false, nil
	case len(series) > 1:
		return 0, false, fmt.Errorf("prometheus at %s: query returned %d series where one value is needed (aggregate it to one series, e.g. with sum() or max()): %s", c.address, len(series), query)
	}
	v := series[0].Value
	if math.IsNaN(v) {
		return 0, false, nil
	}
	return v, true, nil
}

// QuerySeries runs an instant query now and returns every series of a vector, or a scalar as
// one series without labels; any other result type is an error.
func (c *Client) QuerySeries(ctx context.Context, query string) ([]Series, error) {
	c.queries.Add(1)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, _, err := c.api.Query(ctx, query, time.Now())
	if err != nil {
		return nil, c.describe(err)
	}
	switch r := res.(type) {
	case model.Vector:
		out := make([]Series, len(r))
		for i, sample := range r {
			labels := make(map[string]string, len(sample.Metric))
			for k, v := range sample.Metric {
				labels[string(k)] = string(v)
			}
			out[i] = Series{Labels: labels, Value: float64(sample.Value)}
		}
		return out, nil
	case *model.Scalar:
		return []Series{{Value: float64(r.Value)}}, nil
	}
	return nil, fmt.Errorf("prometheus at %s: query returned a %s; want a vector or a scalar", c.address, res.Type())
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
