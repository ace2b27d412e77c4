package adminapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/replay"
)

// Route names of the process managers' routes.
const (
	RouteProcesses       = "admin.processes"
	RouteProcessInstance = "admin.process_instance"
)

// processes lists process instances: by process, status, parked, stuck
// (no progress for longer than ?stuck=, not done).
func (a *API) processes(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope", "process", "status", "parked", "stuck", "limit", "after")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	o := replay.InstanceOptions{InstanceFilter: process.InstanceFilter{Process: q.Get("process"), Status: q.Get("status"), After: q.Get("after"), Limit: 100}}
	if v := q.Get("parked"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			httpapi.WriteError(w, r, badRequest("parked must be true or false"))
			return
		}
		o.Parked = &b
	}
	if v := q.Get("stuck"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			httpapi.WriteError(w, r, badRequest("stuck must be a positive duration such as 5m"))
			return
		}
		o.StuckFor = d
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			httpapi.WriteError(w, r, badRequest("limit must be an integer from 1 to 1000"))
			return
		}
		o.Limit = n
	}
	c, ok := a.who(w, r, q, "read", false)
	if !ok {
		return
	}
	o.Tenant = c.tenant
	list, err := a.svc.Instances(r.Context(), o)
	if err != nil {
		fail(w, r, err)
		return
	}
	if list == nil {
		list = []process.Instance{}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"scope": map[bool]string{true: "all", false: "tenant"}[c.all], "instances": list})
}

// processInstance shows one instance of the token's tenant (or, with
// scope=all, of ?tenant=): state, history, steps, deadlines.
func (a *API) processInstance(w http.ResponseWriter, r *http.Request) {
	q, err := params(r, "scope", "tenant")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	name, err := httpapi.PathVar(r, "process")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	instance, err := httpapi.PathVar(r, "instance")
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	c, ok := a.who(w, r, q, "read", false)
	if !ok {
		return
	}
	tenant := c.tenant
	if c.all {
		if tenant = q.Get("tenant"); tenant == "" {
			httpapi.WriteError(w, r, badRequest("with scope=all, name the instance's tenant (?tenant=)"))
			return
		}
	} else if q.Get("tenant") != "" && q.Get("tenant") != tenant {
		httpapi.WriteError(w, r, badRequest("tenant is only for scope=all"))
		return
	}
	d, err := a.svc.Instance(r.Context(), tenant, name, instance)
	if errors.Is(err, replay.ErrNotFound) {
		httpapi.WriteError(w, r, httpapi.Errorf(http.StatusNotFound, httpapi.CodeNotFound, "process instance not found"))
		return
	}
	if err != nil {
		fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, d)
}
