package fulfilcmd

import (
	"errors"
	"fmt"
	"time"

	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd/payhttp"
	"github.com/strata-es/strata/module"
)

// Payment providers.
const (
	// ProviderManual: no provider; the customer pays with
	// POST /v1/orders/{id}/pay before the deadline.
	ProviderManual = "manual"
	// ProviderHTTP: the process captures through the provider at
	// PaymentURL (docs/fulfilment.md).
	ProviderHTTP = "http"
)

// Defaults.
const (
	DefaultPaymentTimeout = 15 * time.Minute
	DefaultHTTPTimeout    = payhttp.DefaultTimeout
)

// Environment variables ConfigFromEnv reads.
const (
	EnvProvider    = "STRATA_PAYMENT_PROVIDER"
	EnvURL         = "STRATA_PAYMENT_URL"
	EnvTimeout     = "STRATA_PAYMENT_TIMEOUT"
	EnvHTTPTimeout = "STRATA_PAYMENT_HTTP_TIMEOUT"
)

// Settings are the module's settings (module.Module.Settings): the
// variables ConfigFromEnv reads, with their defaults, for the
// configuration reference.
var Settings = []module.Setting{
	{Name: EnvProvider, Default: ProviderManual, Doc: "fulfilment's payment provider: manual (default; the customer pays with POST /v1/orders/{id}/pay) or http"},
	{Name: EnvURL, Doc: "base URL of the http payment provider's capture API (required for http, refused for manual)"},
	{Name: EnvTimeout, Default: DefaultPaymentTimeout.String(), Doc: "how long a placed order may stay unpaid before fulfilment cancels it, e.g. 15m (default 15m, at least 1s)"},
	{Name: EnvHTTPTimeout, Default: DefaultHTTPTimeout.String(), Doc: "bound on one call to the http payment provider (default 5s)"},
}

// Config configures the fulfilment process.
type Config struct {
	// Provider is ProviderManual (default) or ProviderHTTP.
	Provider string
	// PaymentURL is the http provider's base URL (required for http).
	PaymentURL string
	// PaymentTimeout is how long a placed order may stay unpaid before it
	// is cancelled (default 15m).
	PaymentTimeout time.Duration
	// HTTPTimeout bounds one call to the provider (default 5s).
	HTTPTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Provider == "" {
		c.Provider = ProviderManual
	}
	if c.PaymentTimeout == 0 {
		c.PaymentTimeout = DefaultPaymentTimeout
	}
	if c.HTTPTimeout == 0 {
		c.HTTPTimeout = DefaultHTTPTimeout
	}
}

// Validate reports every setting that is wrong (defaults applied first by
// Processes; call it on a Config after ConfigFromEnv to check early).
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	switch c.Provider {
	case ProviderManual:
		if c.PaymentURL != "" {
			errs = append(errs, fmt.Errorf("%s is set but %s is %q: set %s=http to use it", EnvURL, EnvProvider, c.Provider, EnvProvider))
		}
	case ProviderHTTP:
		if c.PaymentURL == "" {
			errs = append(errs, fmt.Errorf("%s=http needs %s (the provider's base URL)", EnvProvider, EnvURL))
		} else if err := (payhttp.Config{URL: c.PaymentURL}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvURL, err))
		}
	default:
		errs = append(errs, fmt.Errorf("%s %q: want %q or %q", EnvProvider, c.Provider, ProviderManual, ProviderHTTP))
	}
	if c.PaymentTimeout < time.Second {
		errs = append(errs, fmt.Errorf("%s %s: want at least 1s", EnvTimeout, c.PaymentTimeout))
	}
	if c.HTTPTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("%s %s: want a positive duration", EnvHTTPTimeout, c.HTTPTimeout))
	}
	return errors.Join(errs...)
}

// ConfigFromEnv reads the configuration with getenv (the module's
// module.Settings.Get: the entry point read them from the environment): STRATA_PAYMENT_PROVIDER (manual|http, default
// manual), STRATA_PAYMENT_URL (required for http), STRATA_PAYMENT_TIMEOUT
// (a Go duration, default 15m) and STRATA_PAYMENT_HTTP_TIMEOUT (a Go
// duration, default 5s). The result is validated.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{Provider: getenv(EnvProvider), PaymentURL: getenv(EnvURL)}
	var errs []error
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{EnvTimeout, &c.PaymentTimeout}, {EnvHTTPTimeout, &c.HTTPTimeout}} {
		v := getenv(d.env)
		if v == "" {
			continue
		}
		dur, err := time.ParseDuration(v)
		if err != nil || dur <= 0 {
			errs = append(errs, fmt.Errorf("%s %q: want a positive Go duration such as 15m or 30s", d.env, v))
			continue
		}
		*d.to = dur
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
