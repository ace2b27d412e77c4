package auth

import "log/slog"

// ParseKeySet is parseKeySet for the fuzz target: how many keys a JWK set
// yields.
func ParseKeySet(body []byte) (int, error) {
	keys, err := parseKeySet(body, slog.New(slog.DiscardHandler))
	for kid, k := range keys {
		if !keyFits(k.key, k.alg) {
			panic("parseKeySet kept an unusable key " + kid)
		}
	}
	return len(keys), err
}
