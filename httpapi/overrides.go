package httpapi

import (
	"fmt"
	"strings"

	"github.com/strata-es/strata/domain"
)

// parseOverrides reads the per-tenant override syntax the rate limits and
// the in-flight limits share: entries separated by ";", each
// "<tenant>:<class>=<value>", whitespace around separators and empty
// entries ignored. It calls set for every entry; set's error, and every
// malformed entry, is reported with the entry's place and text. value
// names what follows the class ("rate", "limit") and example shows a valid
// entry, in the messages.
func parseOverrides(s, value, example string, set func(tenant domain.TenantID, class, value string) error) error {
	for i, entry := range strings.Split(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("override %d %q: %s", i+1, entry, fmt.Sprintf(format, args...))
		}
		tenantPart, setting, ok := strings.Cut(entry, ":")
		if !ok {
			return fail("want <tenant>:<class>=<%s>, e.g. %s", value, example)
		}
		tenant, err := domain.ParseTenantID(strings.TrimSpace(tenantPart))
		if err != nil {
			return fail("tenant %q must match [a-z0-9-]{1,63}", strings.TrimSpace(tenantPart))
		}
		classPart, v, ok := strings.Cut(setting, "=")
		if !ok {
			return fail("want <class>=<%s> after the tenant", value)
		}
		if err := set(tenant, strings.TrimSpace(classPart), v); err != nil {
			return fail("%v", err)
		}
	}
	return nil
}
