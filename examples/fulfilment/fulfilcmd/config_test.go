package fulfilcmd_test

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd"
)

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    fulfilcmd.Config
		wantErr string
	}{
		{name: "defaults: manual, 15m", want: fulfilcmd.Config{Provider: "manual", PaymentTimeout: 15 * time.Minute, HTTPTimeout: 5 * time.Second}},
		{name: "http with a URL", env: map[string]string{"STRATA_PAYMENT_PROVIDER": "http", "STRATA_PAYMENT_URL": "http://127.0.0.1:9999", "STRATA_PAYMENT_TIMEOUT": "30s", "STRATA_PAYMENT_HTTP_TIMEOUT": "250ms"},
			want: fulfilcmd.Config{Provider: "http", PaymentURL: "http://127.0.0.1:9999", PaymentTimeout: 30 * time.Second, HTTPTimeout: 250 * time.Millisecond}},
		{name: "http without a URL", env: map[string]string{"STRATA_PAYMENT_PROVIDER": "http"}, wantErr: "STRATA_PAYMENT_PROVIDER=http needs STRATA_PAYMENT_URL"},
		{name: "a URL that is no URL", env: map[string]string{"STRATA_PAYMENT_PROVIDER": "http", "STRATA_PAYMENT_URL": "localhost:80"}, wantErr: "STRATA_PAYMENT_URL"},
		{name: "a URL with a password is refused without echoing it", env: map[string]string{"STRATA_PAYMENT_PROVIDER": "http", "STRATA_PAYMENT_URL": "http://u:hunter2@h"}, wantErr: "credentials"},
		{name: "a URL with the manual provider", env: map[string]string{"STRATA_PAYMENT_URL": "http://h"}, wantErr: "set STRATA_PAYMENT_PROVIDER=http"},
		{name: "unknown provider", env: map[string]string{"STRATA_PAYMENT_PROVIDER": "stripe"}, wantErr: `STRATA_PAYMENT_PROVIDER "stripe": want "manual" or "http"`},
		{name: "timeout not a duration", env: map[string]string{"STRATA_PAYMENT_TIMEOUT": "15"}, wantErr: `STRATA_PAYMENT_TIMEOUT "15": want a positive Go duration`},
		{name: "timeout negative", env: map[string]string{"STRATA_PAYMENT_TIMEOUT": "-1m"}, wantErr: "STRATA_PAYMENT_TIMEOUT"},
		{name: "timeout too short", env: map[string]string{"STRATA_PAYMENT_TIMEOUT": "10ms"}, wantErr: "want at least 1s"},
		{name: "http timeout not a duration", env: map[string]string{"STRATA_PAYMENT_HTTP_TIMEOUT": "soon"}, wantErr: "STRATA_PAYMENT_HTTP_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := fulfilcmd.ConfigFromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error leaks the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
