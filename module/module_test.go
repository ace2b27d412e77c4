package module_test

import (
	"strings"
	"testing"

	"github.com/strata-es/strata/module"
)

func TestSettingsReadWhatTheModuleDeclares(t *testing.T) {
	t.Parallel()
	m := module.Module{Name: "billing", Settings: []module.Setting{
		{Name: "BILLING_GRACE", Default: "72h", Doc: "grace period after a failed renewal"},
		{Name: "BILLING_CURRENCY", Doc: "currency of new plans"},
	}}
	env := map[string]string{"BILLING_CURRENCY": " EUR ", "OTHER": "x"}
	s := module.NewSettings(m, func(k string) string { return env[k] })
	if got := s.Get("BILLING_GRACE"); got != "72h" {
		t.Errorf("an unset setting: %q, want its default", got)
	}
	if got := s.Get("BILLING_CURRENCY"); got != "EUR" {
		t.Errorf("a set setting: %q, want EUR (trimmed)", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "does not declare") {
			t.Errorf("reading an undeclared setting: %v, want a panic naming it", r)
		}
	}()
	s.Get("OTHER")
}

func TestSetSettingsRefusesClashesAndBadNames(t *testing.T) {
	t.Parallel()
	a := module.Module{Name: "a", Settings: []module.Setting{{Name: "X_ONE", Doc: "one"}}}
	b := module.Module{Name: "b", Settings: []module.Setting{{Name: "X_ONE", Doc: "again"}, {Name: "lower", Doc: "bad"}, {Name: "NO_DOC"}}}
	_, err := module.Set{a, b}.Settings()
	for _, want := range []string{"modules a and b both declare setting X_ONE", `setting "lower"`, `setting "NO_DOC"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Settings() = %v, want it to name %q", err, want)
		}
	}
	if got, err := (module.Set{a}).Settings(); err != nil || len(got) != 1 {
		t.Errorf("Settings() of one module = %v, %v", got, err)
	}
}
