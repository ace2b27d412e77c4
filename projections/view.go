package projections

import "github.com/strata-es/strata/domain/event"

// What every door (the query API's admin route, the admin API, the replay
// CLI) shows of a projection's status the same way.

// PositionView is a log position as the APIs show it: the consistency
// token and its two numbers.
type PositionView struct {
	Token string `json:"token"`
	Major uint64 `json:"major"`
	Minor uint64 `json:"minor"`
}

// ViewPosition renders p.
func ViewPosition(p event.Position) PositionView { return PositionView{p.Token(), p.Major, p.Minor} }

// TenantErrorText stands for a failing projection's error in a tenant's
// view: the error may be about another tenant's event and may hold
// database text.
const TenantErrorText = "the projection cannot apply an event and retries it; details are in the server log and in the cross-tenant view"

// VisibleError is what a viewer sees of the last error of a projection in
// StateError: the text itself in the cross-tenant view (and the CLI),
// TenantErrorText in a tenant's view or when there is no text.
func (s ProjectionStatus) VisibleError(crossTenant bool) string {
	if crossTenant && s.LastError != "" {
		return s.LastError
	}
	return TenantErrorText
}
