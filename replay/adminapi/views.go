// Package adminapi serves the replay operations over HTTP for the admin
// scope, so that a dashboard can drive what `strata replay` does: a
// projection's status, rebuilds (started in the background, progress
// polled), and the dead-letter store's list, show, retry and discard.
//
// Every route needs a token with the admin scope and works on the token's
// tenant only; ?scope=all widens it to every tenant and needs the
// cross_tenant claim. Cross-tenant requests, and every request that
// changes something, are recorded first through the audit function (the
// admin_audit table, in the caller's tenant), like GET
// /v1/admin/projections?scope=all. Another tenant's dead letter answers 404,
// exactly like a missing one.
//
// It imports replay, projections, domain and httpapi and
// auth; the database is replay's business.
package adminapi

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// Position is a log position as the API shows it (projections.PositionView,
// the same in every door).
type Position = projections.PositionView

func position(p event.Position) Position { return projections.ViewPosition(p) }

// ProjectionStatus is GET /v1/admin/projections/{name}.
type ProjectionStatus struct {
	Name          string        `json:"name"`
	Scope         string        `json:"scope"`
	State         string        `json:"state"`
	Checkpoint    Position      `json:"checkpoint"`
	Head          Position      `json:"head"`
	LagEvents     int64         `json:"lag_events"`
	LagSeconds    float64       `json:"lag_seconds"`
	ParkedStreams int64         `json:"parked_streams"`
	DeadLetters   int64         `json:"dead_letters"`
	LastError     *string       `json:"last_error"`
	Rebuild       *RebuildState `json:"rebuild"`
	Job           *RebuildJob   `json:"job,omitempty"`
	Leftovers     []string      `json:"leftover_tables,omitempty"`
}

// RebuildState is a rebuild in progress or interrupted (cross-tenant view).
type RebuildState struct {
	Scope          string   `json:"scope"`
	Running        bool     `json:"running"`
	Checkpoint     Position `json:"checkpoint"`
	LagEvents      int64    `json:"lag_events"`
	PendingIndexes int      `json:"pending_indexes"`
}

// PlanView is a dry run's answer.
type PlanView struct {
	DryRun          bool          `json:"dry_run"`
	Head            Position      `json:"head"`
	EstimateSeconds float64       `json:"estimate_seconds"`
	Projections     []PlannedView `json:"projections"`
}

// PlannedView is one projection of a dry run (replay.Planned) in the
// API's own names: Go's field names are not a wire format.
type PlannedView struct {
	Name             string      `json:"name"`
	Scope            string      `json:"scope"`
	Tables           []TableView `json:"tables"`
	Resume           bool        `json:"resume"`
	ShadowCheckpoint Position    `json:"shadow_checkpoint"`
	Conflict         string      `json:"conflict"`
	Events           int64       `json:"events"`
	TenantEvents     int64       `json:"tenant_events"`
	Streams          int64       `json:"streams"`
	LiveCheckpoint   Position    `json:"live_checkpoint"`
}

// TableView is a live table and the shadow it would be rebuilt into.
type TableView struct {
	Live   string `json:"live"`
	Shadow string `json:"shadow"`
}

func planView(p replay.Plan, c caller) PlanView {
	out := PlanView{DryRun: true, Head: position(p.Head), EstimateSeconds: p.Estimate.Seconds(), Projections: []PlannedView{}}
	for _, pp := range p.Projections {
		v := PlannedView{Name: pp.Name, Scope: pp.Scope, Tables: []TableView{}, Resume: pp.Resume, ShadowCheckpoint: position(pp.ShadowCheckpoint),
			Conflict: pp.Conflict, Events: pp.Events, TenantEvents: pp.TenantEvents, Streams: pp.Streams, LiveCheckpoint: position(pp.LiveCheckpoint)}
		for _, t := range pp.Tables {
			v.Tables = append(v.Tables, TableView{Live: t.Live, Shadow: t.Shadow})
		}
		if !c.all {
			v.Events = 0 // the whole log's size is not the tenant's business
		}
		out.Projections = append(out.Projections, v)
	}
	return out
}

// ----- dead letters -----

// Letter is a dead letter as the API shows it.
type Letter struct {
	ID            int64           `json:"id"`
	Projection    string          `json:"projection"`
	Tenant        string          `json:"tenant"`
	Stream        string          `json:"stream"`
	Version       int64           `json:"version"`
	EventID       string          `json:"event_id"`
	Position      string          `json:"position"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Data          json.RawMessage `json:"data"`
	Metadata      event.Metadata  `json:"metadata"`
	RecordedAt    time.Time       `json:"recorded_at"`
	Error         string          `json:"error"`
	Attempts      int             `json:"attempts"`
	FirstFailedAt *time.Time      `json:"first_failed_at"`
	LastFailedAt  *time.Time      `json:"last_failed_at"`
	NextAttemptAt *time.Time      `json:"next_attempt_at"`
	Head          bool            `json:"head"`
	Status        string          `json:"status"`
	ParkedAt      time.Time       `json:"parked_at"`
	ResolvedAt    *time.Time      `json:"resolved_at"`
	ResolvedBy    string          `json:"resolved_by,omitempty"`
	Reason        string          `json:"reason,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// LetterView renders a dead letter with its full error text, for operators
// (the CLI's --json and the cross-tenant view); a tenant's view goes
// through letterView.
func LetterView(l projections.DeadLetter) Letter {
	data := l.Event.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return Letter{ID: l.ID, Projection: l.Projection, Tenant: l.Tenant, Stream: l.Event.Stream, Version: l.Event.Version,
		EventID: l.Event.ID, Position: l.Event.Position.Token(), Type: l.Event.Type, SchemaVersion: l.Event.SchemaVersion,
		Data: data, Metadata: l.Event.Metadata, RecordedAt: l.Event.RecordedAt.UTC(), Error: l.Error, Attempts: l.Attempts,
		FirstFailedAt: timePtr(l.FirstFailedAt), LastFailedAt: timePtr(l.LastFailedAt), NextAttemptAt: timePtr(l.NextAttemptAt),
		Head: l.Head, Status: string(l.Status), ParkedAt: l.ParkedAt.UTC(), ResolvedAt: timePtr(l.ResolvedAt),
		ResolvedBy: l.ResolvedBy, Reason: l.Reason}
}

// tenantLetterError replaces a dead letter's error in a tenant's view when
// it holds PostgreSQL's text (e.g. "ERROR: bigint out of range (SQLSTATE
// 22003)"): database error text never reaches a client (ARCHITECTURE
// decision 3), and it can name tables, constraints and values. The
// SQLSTATE code stays, so that the tenant can tell one failure from
// another; the cross-tenant view and `strata replay dlq show` keep the
// full text. Errors of the projection's own code (a missing row, an
// unexpected event, a consumer's reason) carry no database text and are
// shown as they are, as before.
const tenantLetterError = "the projection's database statement failed on this event%s; the details are in the cross-tenant view and `strata replay dlq show`"

// sqlState finds the code pgconn.PgError.Error() ends its text with.
var sqlState = regexp.MustCompile(`\(SQLSTATE ([0-9A-Z]{5})\)`)

// publicLetterError is a letter's error as a tenant's view shows it.
func publicLetterError(text string) string {
	if !strings.Contains(text, "SQLSTATE") {
		return text
	}
	code := ""
	if m := sqlState.FindStringSubmatch(text); m != nil {
		code = " (SQLSTATE " + m[1] + ")"
	}
	return fmt.Sprintf(tenantLetterError, code)
}

// letterView renders a letter for c: sanitized unless c sees every tenant.
func letterView(l projections.DeadLetter, c caller) Letter {
	v := LetterView(l)
	if !c.all {
		v.Error = publicLetterError(v.Error)
	}
	return v
}

// RetriedStream is one stream of a retry's answer.
type RetriedStream struct {
	Projection    string     `json:"projection"`
	Tenant        string     `json:"tenant"`
	Stream        string     `json:"stream"`
	Applied       []int64    `json:"applied"`
	Unparked      bool       `json:"unparked"`
	Failed        *Letter    `json:"failed"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
}

func retryView(rep replay.RetryReport, c caller) map[string]any {
	out := []RetriedStream{}
	for _, s := range rep.Streams {
		v := RetriedStream{Projection: s.Projection, Tenant: s.Tenant, Stream: s.Stream, Applied: s.Applied, Unparked: s.Unparked,
			NextAttemptAt: timePtr(s.NextAttemptAt)}
		if v.Applied == nil {
			v.Applied = []int64{}
		}
		if s.Failed != nil {
			f := letterView(*s.Failed, c)
			v.Failed = &f
		}
		out = append(out, v)
	}
	return map[string]any{"streams": out, "applied": rep.Applied(), "still_parked": len(rep.Failed())}
}
