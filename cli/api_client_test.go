package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// apiCall sends one request to a serve process with a bearer token (and a
// JSON content type when there is a body), header holding name, value
// pairs, and returns the status, the body and the headers. client nil is
// http.DefaultClient.
func apiCall(t testing.TB, client *http.Client, base, token, method, path, body string, header ...string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if client == nil {
		client = http.DefaultClient
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw, res.Header
}

// jsonCaller returns a function that sends one request with token and
// returns its JSON object, failing the test on a status of 300 or more.
func jsonCaller(t *testing.T, base, token string) func(method, path, body string) map[string]any {
	return func(method, path, body string) map[string]any {
		t.Helper()
		status, raw, _ := apiCall(t, nil, base, token, method, path, body)
		if status >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, status, raw)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %v %s", method, path, err, raw)
		}
		return out
	}
}
