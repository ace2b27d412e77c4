// strata console: hand-written, no build step, no dependency. It calls the
// admin and platform HTTP APIs with the operator's bearer token and shows
// every error by the message of the API's one error shape
// ({"error":{"code","message"}}). See docs/console.md.
'use strict';
(() => {
  const KEY = 'strata.console.token';
  const SAMPLES = 40; // points of the live lag chart
  let token = null;
  let timers = [];
  const samples = {}; // projection -> [{events, seconds}]

  // ----- the token: from the fragment once, then sessionStorage -----

  function takeFragmentToken() {
    const m = /^#token=([^&]+)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
      // The token leaves the address bar (and the history entry) at once.
      history.replaceState(null, '', location.pathname + location.search + '#/projections');
    }
    token = sessionStorage.getItem(KEY);
  }

  function claims() {
    try {
      const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
      return JSON.parse(atob(part + '='.repeat((4 - part.length % 4) % 4)));
    } catch (e) {
      return {};
    }
  }

  // ----- small DOM helpers -----

  const $ = (id) => document.getElementById(id);

  // h builds an element: attrs may hold text, on (event -> handler), and
  // any attribute; children are nodes or strings.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') el.textContent = v;
      else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else if (k === 'class') el.className = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === undefined || kid === null || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }

  function state(s) {
    const v = s === undefined || s === null || s === '' ? 'unknown' : String(s);
    return h('span', { class: 'state state-' + v.replace(/[^a-z_-]/gi, ''), text: v });
  }

  function table(caption, heads, rows, id) {
    return h('div', { class: 'table' },
      h('table', { id },
        h('caption', { text: caption }),
        h('thead', {}, h('tr', {}, heads.map((x) => h('th', { scope: 'col', text: x })))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: heads.length, text: 'none' })))));
  }

  function row(...cells) {
    return h('tr', {}, cells.map((c) => h('td', {}, c)));
  }

  function field(label, input) {
    return h('label', { class: 'field' }, label, input);
  }

  function when(t) {
    return t ? new Date(t).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '';
  }

  function json(v) {
    return h('pre', {}, JSON.stringify(v, null, 2));
  }

  function every(ms, fn) {
    timers.push(setInterval(fn, ms));
  }

  function stopTimers() {
    timers.forEach(clearInterval);
    timers = [];
  }

  // ----- the API -----

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const opt = { method, headers: { Authorization: 'Bearer ' + token, Accept: 'application/json' }, cache: 'no-store' };
    if (body !== undefined) {
      opt.headers['Content-Type'] = 'application/json';
      opt.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, opt);
    } catch (e) {
      throw new APIError(0, 'unreachable', 'the server did not answer (' + e.message + ')');
    }
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      data = null;
    }
    if (!res.ok) {
      const e = data && data.error;
      if (e && typeof e.message === 'string') throw new APIError(res.status, e.code, e.message);
      throw new APIError(res.status, 'http_' + res.status, 'the server answered HTTP ' + res.status);
    }
    return data;
  }

  function errorText(e) {
    if (!(e instanceof APIError)) return 'error: ' + e.message;
    return 'error: ' + e.message + (e.status ? ' (' + e.code + ', HTTP ' + e.status + ')' : '');
  }

  // fail shows an error in the page's alert region, or in box when given.
  function fail(e, box) {
    if (e instanceof APIError && e.status === 401) {
      $('alert').textContent = errorText(e) + ' — log in again.';
      sessionStorage.removeItem(KEY);
      token = null;
      showLogin();
      return;
    }
    if (box) box.replaceChildren(h('p', { class: 'error', role: 'alert', text: errorText(e) }));
    else $('alert').textContent = errorText(e);
  }

  function say(msg) {
    $('status').textContent = msg;
  }

  const enc = encodeURIComponent;

  function query(params) {
    const q = Object.entries(params).filter(([, v]) => v !== '' && v !== undefined && v !== null);
    return q.length ? '?' + q.map(([k, v]) => enc(k) + '=' + enc(v)).join('&') : '';
  }

  // ----- login -----

  function showLogin() {
    stopTimers();
    $('nav').hidden = true;
    $('logout').hidden = true;
    $('who').textContent = '';
    $('page').hidden = true;
    $('login').hidden = false;
    $('login-token').focus();
  }

  // ----- pages -----

  const pages = {};

  // Projections: status of each, a live lag chart, rebuilds.
  pages.projections = async (page) => {
    const list = await api('GET', '/v1/admin/projections');
    const names = list.projections.map((p) => p.name);
    const body = h('tbody');
    const rowsByName = {};
    for (const name of names) {
      const cells = {};
      const tr = h('tr', { 'data-projection': name });
      for (const k of ['name', 'state', 'checkpoint', 'head', 'lag_events', 'lag_seconds', 'parked', 'letters', 'chart']) {
        cells[k] = h('td', { 'data-col': k });
        tr.append(cells[k]);
      }
      cells.name.textContent = name;
      cells.letters.append(h('a', { href: '#/dead-letters?projection=' + enc(name) }));
      rowsByName[name] = cells;
      body.append(tr);
    }
    const jobBox = h('div', { id: 'rebuild-job', class: 'result', 'aria-live': 'polite' }, h('p', { class: 'muted', text: 'No rebuild started from this page yet.' }));
    const scopeSel = h('select', { id: 'rebuild-scope', name: 'scope' },
      h('option', { value: 'tenant', text: "this tenant's rows" }),
      h('option', { value: 'all', text: 'every tenant (cross-tenant token)' }),
      h('option', { value: 'from', text: 'from a consistency token (re-apply from there)' }));
    const fromInput = h('input', { id: 'rebuild-from', name: 'from', placeholder: 'consistency token', autocomplete: 'off' });
    const projSel = h('select', { id: 'rebuild-projection', name: 'projection' }, names.map((n) => h('option', { value: n, text: n })));
    const form = h('form', { class: 'row', id: 'rebuild-form', on: { submit: (ev) => { ev.preventDefault(); startRebuild(); } } },
      field('Projection', projSel), field('Scope', scopeSel), field('From (for "from")', fromInput),
      h('button', { type: 'submit', id: 'rebuild-start', text: 'Start rebuild' }));
    page.replaceChildren(
      h('h2', { text: 'Projections' }),
      h('p', { class: 'muted', id: 'projections-updated', 'aria-live': 'off' }),
      h('div', { class: 'table' }, h('table', { id: 'projections' },
        h('caption', { text: 'State of every projection (lag of this tenant; refreshed every 2 s)' }),
        h('thead', {}, h('tr', {}, ['Projection', 'State', 'Checkpoint', 'Head', 'Lag (events)', 'Lag (seconds)', 'Parked streams', 'Dead letters', 'Lag, recent samples']
          .map((x) => h('th', { scope: 'col', text: x })))),
        body)),
      h('h3', { text: 'Rebuild' }), form, jobBox);

    async function refresh() {
      try {
        const now = await api('GET', '/v1/admin/projections');
        const details = await Promise.all(now.projections.map((p) => api('GET', '/v1/admin/projections/' + enc(p.name))));
        now.projections.forEach((p, i) => {
          const c = rowsByName[p.name];
          if (!c) return;
          const detail = details[i];
          c.state.replaceChildren(state(detail.state), detail.last_error ? h('div', { text: detail.last_error }) : '');
          c.checkpoint.textContent = p.checkpoint.token;
          c.head.textContent = p.head.token;
          c.lag_events.textContent = String(p.lag.events);
          c.lag_seconds.textContent = p.lag.seconds.toFixed(1);
          c.parked.textContent = String(detail.parked_streams);
          c.letters.firstChild.textContent = detail.dead_letters + (detail.dead_letters ? ' parked' : '');
          const s = (samples[p.name] = samples[p.name] || []);
          s.push({ events: p.lag.events, seconds: p.lag.seconds });
          if (s.length > SAMPLES) s.shift();
          c.chart.replaceChildren(chart(p.name, s));
        });
        $('projections-updated').textContent = 'updated ' + when(new Date());
      } catch (e) {
        fail(e);
      }
    }

    async function startRebuild() {
      const name = projSel.value;
      const scope = scopeSel.value;
      const req = {};
      if (scope === 'from') {
        if (!fromInput.value.trim()) {
          jobBox.replaceChildren(h('p', { role: 'alert', text: 'error: a rebuild "from" needs a consistency token' }));
          fromInput.focus();
          return;
        }
        req.from = fromInput.value.trim();
      }
      const qs = scope === 'all' ? '?scope=all' : '';
      try {
        const job = await api('POST', '/v1/admin/projections/' + enc(name) + '/rebuild' + qs, req);
        showJob(job);
        const poll = setInterval(async () => {
          try {
            const j = await api('GET', '/v1/admin/projections/' + enc(name) + '/rebuild' + qs);
            showJob(j);
            if (j.state !== 'running') clearInterval(poll);
          } catch (e) {
            clearInterval(poll);
            fail(e, jobBox);
          }
        }, 500);
        timers.push(poll);
      } catch (e) {
        fail(e, jobBox);
      }
    }

    function showJob(j) {
      const pct = j.total > 0 ? ' (' + Math.floor((100 * j.done) / j.total) + ' %)' : '';
      jobBox.replaceChildren(
        h('p', {}, 'Rebuild of ', h('strong', { text: j.projection }), ' (scope ', j.scope, '): ', state(j.state), ', phase ', h('span', { 'data-phase': j.phase, text: j.phase })),
        h('p', { text: 'events ' + j.done + ' of ' + j.total + pct + (j.events_per_second ? ', ' + Math.round(j.events_per_second) + ' events/s' : '') + (j.state === 'running' && j.eta_seconds ? ', about ' + Math.ceil(j.eta_seconds) + ' s left' : '') }),
        h('p', { text: 'started ' + when(j.started_at) + (j.ended_at ? ', ended ' + when(j.ended_at) : '') + (j.checkpoint ? ', checkpoint ' + j.checkpoint.token : '') }),
        j.error ? h('p', { role: 'alert', text: 'error: ' + j.error }) : '',
        (j.notes || []).length ? h('ul', {}, j.notes.map((n) => h('li', { text: n }))) : '');
      jobBox.setAttribute('data-state', j.state);
    }

    await refresh();
    every(2000, refresh);
  };

  // chart draws recent lag samples (events) as an inline SVG line; the
  // numbers are also written out (not a picture-only signal).
  function chart(name, s) {
    const w = 160, hgt = 40;
    const max = Math.max(1, ...s.map((x) => x.events));
    const step = s.length > 1 ? w / (SAMPLES - 1) : 0;
    const pts = s.map((x, i) => (i * step).toFixed(1) + ',' + (hgt - 2 - ((hgt - 4) * x.events) / max).toFixed(1)).join(' ');
    const last = s.length ? s[s.length - 1].events : 0;
    const label = 'lag of ' + name + ' over the last ' + s.length + ' samples: now ' + last + ' events, highest ' + Math.max(0, ...s.map((x) => x.events));
    const ns = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(ns, 'svg');
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + hgt);
    svg.setAttribute('class', 'chart');
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', label);
    const line = document.createElementNS(ns, 'polyline');
    line.setAttribute('points', pts);
    svg.append(line);
    return h('div', {}, svg, h('div', { class: 'muted', text: 'now ' + last + ', max ' + Math.max(0, ...s.map((x) => x.events)) }));
  }

  // Dead letters: filter, list, retry all.
  pages['dead-letters'] = async (page, rest, params) => {
    if (rest[0]) return letterPage(page, rest[0]);
    const f = {
      projection: h('input', { id: 'dl-projection', name: 'projection', value: params.get('projection') || '', autocomplete: 'off' }),
      tenant: h('input', { id: 'dl-tenant', name: 'tenant', value: params.get('tenant') || '', autocomplete: 'off' }),
      stream: h('input', { id: 'dl-stream', name: 'stream', value: params.get('stream') || '', autocomplete: 'off' }),
      error: h('input', { id: 'dl-error', name: 'error', value: params.get('error') || '', autocomplete: 'off' }),
      status: h('select', { id: 'dl-status', name: 'status' }, ['parked', 'all', 'retried', 'discarded', 'superseded'].map((s) => h('option', { value: s, text: s, selected: (params.get('status') || 'parked') === s }))),
      all: h('input', { type: 'checkbox', id: 'dl-all', name: 'scope', checked: params.get('scope') === 'all' }),
    };
    const result = h('div', { id: 'retry-result', 'aria-live': 'polite' });
    const filter = h('form', { class: 'row', id: 'dl-filter', on: { submit: (ev) => {
      ev.preventDefault();
      location.hash = '#/dead-letters' + query({ projection: f.projection.value.trim(), tenant: f.tenant.value.trim(), stream: f.stream.value.trim(),
        error: f.error.value.trim(), status: f.status.value === 'parked' ? '' : f.status.value, scope: f.all.checked ? 'all' : '' });
    } } },
    field('Projection', f.projection), field('Tenant (every tenant only)', f.tenant), field('Stream', f.stream), field('Error contains', f.error), field('Status', f.status),
    h('label', {}, f.all, ' every tenant (cross-tenant token)'), h('button', { type: 'submit', text: 'Filter' }));
    const scope = params.get('scope') === 'all' ? 'all' : '';
    const data = await api('GET', '/v1/admin/dead-letters' + query({ projection: params.get('projection') || '', stream: params.get('stream') || '', status: params.get('status') || '', scope, limit: 1000 }));
    const tenantF = params.get('tenant') || '';
    const errF = (params.get('error') || '').toLowerCase();
    const letters = data.dead_letters.filter((l) => (!tenantF || l.tenant === tenantF) && (!errF || l.error.toLowerCase().includes(errF)));
    const retryAll = h('button', { type: 'button', id: 'dl-retry-all', text: 'Retry every parked stream' + (params.get('projection') ? ' of ' + params.get('projection') : ''), on: { click: async () => {
      try {
        const body = { all: true };
        if (params.get('projection')) body.projection = params.get('projection');
        showRetry(result, await api('POST', '/v1/admin/dead-letters/retry' + query({ scope }), body));
      } catch (e) {
        fail(e, result);
      }
    } } });
    page.replaceChildren(h('h2', { text: 'Dead letters' }), filter,
      table(letters.length + ' dead letter(s) (' + data.scope + ' scope)', ['ID', 'Projection', 'Tenant', 'Stream', 'Version', 'Event type', 'Status', 'Attempts', 'Error'],
        letters.map((l) => row(h('a', { href: '#/dead-letters/' + l.id + (scope ? '?scope=all' : ''), text: 'letter ' + l.id }), l.projection, l.tenant, l.stream, String(l.version), l.type,
          h('span', {}, state(l.status), l.head ? ' (head of its stream)' : ''), String(l.attempts), l.error)), 'dead-letters'),
      h('div', { class: 'row' }, retryAll), result);
  };

  function showRetry(box, rep) {
    box.replaceChildren(h('div', { class: 'result', 'data-applied': rep.applied, 'data-still-parked': rep.still_parked },
      h('h3', { text: 'Retry result' }),
      h('p', { id: 'retry-summary', text: 'applied ' + rep.applied + ' event(s); ' + rep.still_parked + ' stream(s) still parked' }),
      table('Streams retried', ['Projection', 'Tenant', 'Stream', 'Applied versions', 'Outcome'],
        rep.streams.map((s) => row(s.projection, s.tenant, s.stream, s.applied.join(', ') || 'none',
          s.unparked ? state('unparked') : h('span', {}, state('parked'), ' failed again: ', s.failed ? s.failed.error : ''))))));
  }

  async function letterPage(page, id, done) {
    const params = new URLSearchParams(location.hash.split('?')[1] || '');
    const scope = params.get('scope') === 'all' ? 'all' : '';
    const l = await api('GET', '/v1/admin/dead-letters/' + enc(id) + query({ scope }));
    const others = await api('GET', '/v1/admin/dead-letters' + query({ projection: l.projection, stream: l.stream, status: 'all', scope, limit: 1000 }));
    const result = h('div', { id: 'retry-result', 'aria-live': 'polite' });
    const reason = h('textarea', { id: 'discard-reason', name: 'reason', rows: 2, required: true });
    // After an action the page is read again (the letter's status
    // changes) and shows the action's result.
    const act = async (fn) => {
      try {
        const show = await fn();
        await letterPage(page, id, show);
      } catch (e) {
        fail(e, result);
      }
    };
    const retried = (rep) => (box) => showRetry(box, rep);
    page.replaceChildren(
      h('p', {}, h('a', { href: '#/dead-letters' + query({ projection: l.projection, scope }), text: '← all dead letters of ' + l.projection })),
      h('h2', { id: 'letter-title', text: 'Dead letter ' + l.id }),
      h('dl', { id: 'letter' },
        [['Status', state(l.status)], ['Projection', l.projection], ['Tenant', l.tenant], ['Stream', l.stream + ' version ' + l.version + (l.head ? ' (head of the parked stream)' : '')],
          ['Event', l.type + ' v' + l.schema_version + ', ID ' + l.event_id + ', position ' + l.position + ', recorded ' + when(l.recorded_at)],
          ['Attempts', String(l.attempts) + (l.first_failed_at ? ', first failed ' + when(l.first_failed_at) : '') + (l.last_failed_at ? ', last ' + when(l.last_failed_at) : '') + (l.next_attempt_at ? ', next automatic attempt ' + when(l.next_attempt_at) : '')],
          ['Resolved', l.resolved_at ? when(l.resolved_at) + ' by ' + (l.resolved_by || '?') + (l.reason ? ': ' + l.reason : '') : 'no']]
          .map(([k, v]) => [h('dt', { text: k }), h('dd', {}, v)])),
      h('h3', { text: 'Error' }), h('pre', { id: 'letter-error', text: l.error }),
      h('h3', { text: 'Payload' }), json(l.data),
      h('h3', { text: 'Metadata' }), json(l.metadata),
      h('h3', { text: 'Actions' }),
      h('div', { class: 'row' },
        h('button', { type: 'button', id: 'retry-one', text: 'Retry this letter', on: { click: () => act(async () => retried(await api('POST', '/v1/admin/dead-letters/' + l.id + '/retry' + query({ scope })))) } }),
        h('button', { type: 'button', id: 'retry-stream', text: 'Retry the stream ' + l.stream, on: { click: () => act(async () => retried(await api('POST', '/v1/admin/dead-letters/retry' + query({ scope }), { projection: l.projection, stream: l.stream }))) } })),
      h('form', { class: 'row', id: 'discard-form', on: { submit: (ev) => {
        ev.preventDefault();
        act(async () => {
          const d = await api('POST', '/v1/admin/dead-letters/' + l.id + '/discard' + query({ scope }), { reason: reason.value });
          return (box) => box.replaceChildren(h('p', { class: 'result', id: 'discard-result' }, 'letter ' + d.id + ' is now ', state(d.status), ' by ' + d.resolved_by + ': ' + d.reason));
        });
      } } }, field('Reason for discarding (recorded)', reason), h('button', { type: 'submit', id: 'discard', text: 'Discard this letter' })),
      result,
      table("The stream's dead letters", ['ID', 'Version', 'Event type', 'Status', 'Attempts', 'Error'],
        others.dead_letters.map((o) => row(h('a', { href: '#/dead-letters/' + o.id + (scope ? '?scope=all' : ''), text: 'letter ' + o.id }), String(o.version), o.type, state(o.status), String(o.attempts), o.error)), 'stream-letters'));
    if (done) done(result);
  }

  // Process managers: instances by state, stuck ones, one instance.
  pages.processes = async (page, rest, params) => {
    if (rest.length >= 2) return instancePage(page, decodeURIComponent(rest[0]), decodeURIComponent(rest[1]), params);
    const f = {
      process: h('input', { id: 'pm-process', value: params.get('process') || '', autocomplete: 'off' }),
      status: h('input', { id: 'pm-status', value: params.get('status') || '', autocomplete: 'off' }),
      parked: h('select', { id: 'pm-parked' }, [['', 'any'], ['true', 'parked'], ['false', 'not parked']].map(([v, t]) => h('option', { value: v, text: t, selected: (params.get('parked') || '') === v }))),
      stuck: h('input', { id: 'pm-stuck', value: params.get('stuck') || '', placeholder: 'e.g. 5m', autocomplete: 'off' }),
    };
    const form = h('form', { class: 'row', id: 'pm-filter', on: { submit: (ev) => {
      ev.preventDefault();
      location.hash = '#/processes' + query({ process: f.process.value.trim(), status: f.status.value.trim(), parked: f.parked.value, stuck: f.stuck.value.trim() });
    } } }, field('Process', f.process), field('Status', f.status), field('Parked', f.parked), field('Stuck for at least', f.stuck), h('button', { type: 'submit', text: 'Filter' }),
    h('a', { href: '#/processes?stuck=5m', text: 'stuck for 5 minutes or more' }));
    const data = await api('GET', '/v1/admin/processes' + query({ process: params.get('process') || '', status: params.get('status') || '', parked: params.get('parked') || '', stuck: params.get('stuck') || '', limit: 1000 }));
    const counts = {};
    for (const i of data.instances) counts[i.process + ' / ' + i.status] = (counts[i.process + ' / ' + i.status] || 0) + 1;
    page.replaceChildren(h('h2', { text: 'Process managers' }), form,
      table('Instances by state', ['Process / status', 'Instances'], Object.entries(counts).map(([k, n]) => row(k, String(n))), 'pm-counts'),
      table(data.instances.length + ' instance(s)', ['Instance', 'Process', 'Status', 'Done', 'Parked', 'Inputs', 'Pending steps', 'Next deadline', 'Last progress'],
        data.instances.map((i) => row(h('a', { href: '#/processes/' + enc(i.process) + '/' + enc(i.instance), text: i.instance }), i.process, state(i.status), i.done ? 'done' : 'open',
          i.parked ? state('parked') : 'no', String(i.inputs), String(i.pending_steps), when(i.next_deadline), when(i.last_progress_at))), 'pm-instances'));
  };

  async function instancePage(page, process, instance) {
    const d = await api('GET', '/v1/admin/processes/' + enc(process) + '/instances/' + enc(instance));
    page.replaceChildren(
      h('p', {}, h('a', { href: '#/processes', text: '← all instances' })),
      h('h2', { text: process + ' ' + instance }),
      h('p', {}, 'status ', state(d.status), d.done ? ', done' : ', open', d.parked ? ', parked' : '', ', last progress ' + when(d.last_progress_at)),
      h('h3', { text: 'State' }), json(d.state),
      table('History', ['#', 'Kind', 'Summary', 'Status after', 'Note', 'At'], (d.history || []).map((e) => row(String(e.id), e.kind, JSON.stringify(e.summary), state(e.status_after), e.note || '', when(e.at))), 'pm-history'),
      table('Steps', ['Step', 'Kind', 'Name', 'Status', 'Attempts'], (d.steps || []).map((s) => row(s.step, s.kind, s.name, state(s.status), String(s.attempts))), 'pm-steps'),
      table('Deadlines', ['Name', 'Due', 'Status', 'Fired'], (d.deadlines || []).map((x) => row(x.name, when(x.due_at), state(x.status), when(x.fired_at))), 'pm-deadlines'));
  }

  // Tenants (platform scope): list, status, quotas, suspend/resume, export,
  // erasure where the routes exist.
  pages.tenants = async (page) => {
    const data = await api('GET', '/v1/platform/tenants');
    const result = h('div', { id: 'tenant-result', 'aria-live': 'polite' });
    const act = async (fn) => {
      try {
        await fn();
      } catch (e) {
        fail(e, result);
      }
    };
    const rows = data.tenants.map((t) => {
      const reason = h('input', { id: 'reason-' + t.id, 'aria-label': 'reason for suspending ' + t.id, placeholder: 'reason', autocomplete: 'off' });
      const actions = h('div', { class: 'row' });
      if (t.status === 'suspended') {
        actions.append(h('button', { type: 'button', id: 'resume-' + t.id, text: 'Resume ' + t.id, on: { click: () => act(async () => {
          const v = await api('POST', '/v1/platform/tenants/' + enc(t.id) + '/resume');
          say('tenant ' + v.id + ' is now ' + v.status);
          await route();
          $('suspend-' + t.id)?.focus(); // the keyboard stays on the tenant's row
        }) } }));
      } else if (t.status === 'active') {
        actions.append(reason, h('button', { type: 'button', id: 'suspend-' + t.id, text: 'Suspend ' + t.id, on: { click: () => act(async () => {
          const v = await api('POST', '/v1/platform/tenants/' + enc(t.id) + '/suspend', { reason: reason.value || 'suspended from the console' });
          say('tenant ' + v.id + ' is now ' + v.status);
          await route();
          $('resume-' + t.id)?.focus();
        }) } }));
      }
      actions.append(h('button', { type: 'button', id: 'export-' + t.id, text: 'Export ' + t.id, on: { click: () => act(() => startExport(t.id, result)) } }));
      if (erasure) actions.append(h('button', { type: 'button', id: 'erasure-' + t.id, text: 'Erasure of ' + t.id, on: { click: () => act(() => showErasure(t.id, result)) } }));
      if (archives) {
        actions.append(h('button', { type: 'button', id: 'archive-status-' + t.id, text: 'Archive of ' + t.id, on: { click: () => act(() => showArchive(t.id, result)) } }));
        if (t.status === 'archived') {
          actions.append(h('button', { type: 'button', id: 'rehydrate-' + t.id, text: 'Rehydrate ' + t.id, on: { click: () => act(async () => {
            await api('POST', '/v1/platform/tenants/' + enc(t.id) + '/rehydrate');
            say('re-hydration of ' + t.id + ' started');
            await showArchive(t.id, result);
          }) } }));
        }
      }
      return h('tr', { 'data-tenant': t.id }, [t.id, t.name, h('span', { 'data-status': t.status }, state(t.status), t.status_reason ? ' — ' + t.status_reason : ''),
        h('span', {}, Object.entries(t.quotas || {}).map(([k, v]) => k + ': ' + (v === null ? 'none' : v)).join(', ') || 'defaults'),
        t.tier || '', t.steps_pending.length ? 'pending: ' + t.steps_pending.join(', ') : 'provisioned', actions].map((c) => h('td', {}, c)));
    });
    page.replaceChildren(h('h2', { text: 'Tenants' }),
      table(data.tenants.length + ' tenant(s)', ['ID', 'Name', 'Status', 'Quotas', 'Tier', 'Provisioning', 'Actions'], rows, 'tenants'), result);
  };

  // erasure is set when the server documents the erasure routes (they land
  // separately): the console shows what exists.
  let erasure = false;
  // archives is set when the server documents the archive routes.
  let archives = false;

  async function startExport(id, box) {
    const job = await api('POST', '/v1/platform/tenants/' + enc(id) + '/exports');
    const show = (j) => {
      const parts = [h('p', {}, 'Export ' + (j.id || j.job || '') + ' of ' + id + ': ', state(j.status || j.state))];
      if (j.error) parts.push(h('p', { role: 'alert', text: 'error: ' + (j.error.message || j.error) }));
      if ((j.status || j.state) === 'done') {
        parts.push(h('button', { type: 'button', id: 'archive-' + id, text: 'Download the archive', on: { click: async () => {
          try {
            const res = await fetch('/v1/platform/tenants/' + enc(id) + '/exports/' + enc(j.id) + '/archive', { headers: { Authorization: 'Bearer ' + token } });
            if (!res.ok) {
              const e = await res.json().catch(() => null);
              throw new APIError(res.status, e && e.error ? e.error.code : 'http_' + res.status, e && e.error ? e.error.message : 'HTTP ' + res.status);
            }
            const a = h('a', { href: URL.createObjectURL(await res.blob()), download: 'strata-export-' + id + '.tar.gz' });
            document.body.append(a);
            a.click();
            a.remove();
          } catch (e) {
            fail(e, box);
          }
        } } }));
      }
      parts.push(json(j));
      box.replaceChildren(h('div', { class: 'result', id: 'export-result' }, parts));
    };
    show(job);
    const poll = setInterval(async () => {
      try {
        const j = await api('GET', '/v1/platform/tenants/' + enc(id) + '/exports/' + enc(job.id));
        show(j);
        if (!['running', 'pending', 'queued'].includes(j.status || j.state)) clearInterval(poll);
      } catch (e) {
        clearInterval(poll);
        fail(e, box);
      }
    }, 1000);
    timers.push(poll);
  }

  async function showErasure(id, box) {
    // Read only: an erasure is started with `strata tenants erase` or the
    // API, deliberately not with one click here.
    const e = await api('GET', '/v1/platform/tenants/' + enc(id) + '/erasure');
    box.replaceChildren(h('div', { class: 'result', id: 'erasure-result' },
      h('h3', { text: 'Erasure of ' + id }),
      h('p', { text: 'requested by ' + e.requested_by + ' (' + e.reason + '), started ' + when(e.started_at) + ', updated ' + when(e.updated_at) + ', receipt ' + e.receipt_id }),
      e.last_error ? h('p', { role: 'alert', text: 'error: ' + e.last_error }) : '',
      table('Steps done', ['Step', 'At'], Object.entries(e.steps || {}).map(([k, v]) => row(k, when(v))), 'erasure-steps'),
      table('Stores', ['Store', 'Kind', 'Mode', 'State', 'Rows before', 'Rows after', 'Verification'],
        (e.stores || []).map((x) => row(x.name, x.kind, x.mode, state(x.state), String(x.count_before), x.count_after === undefined ? '' : String(x.count_after), x.verification + (x.note ? ' — ' + x.note : ''))), 'erasure-stores'),
      e.receipt ? h('div', {}, h('h4', { text: 'Receipt ' + (e.receipt.receipt_id || '') }), h('p', { text: 'content hash ' + e.receipt.content_hash }), json(e.receipt)) : h('p', { text: 'no receipt yet: the erasure has not finished' })));
  }

  async function showArchive(id, box) {
    // Read only but for the re-hydration: an archive purges the tenant's
    // rows, and is started with `strata tenants archive` or the API.
    const a = await api('GET', '/v1/platform/tenants/' + enc(id) + '/archive');
    const r = a.rehydration;
    box.replaceChildren(h('div', { class: 'result', id: 'archive-result' },
      h('h3', { text: 'Archive of ' + id + ': ' + a.phase }),
      h('p', { text: 'requested by ' + a.requested_by + ' (' + a.reason + '), started ' + when(a.started_at) + ', updated ' + when(a.updated_at) + '; the tenant was ' + a.prior_status }),
      a.last_error ? h('p', { role: 'alert', text: 'error: ' + a.last_error }) : '',
      a.object_key ? h('p', { text: 'object ' + a.object_key + ' in ' + a.store + ', ' + a.bytes + ' bytes, sha256 ' + a.sha256 }) : '',
      table('Steps done', ['Step', 'At'], Object.entries(a.steps || {}).map(([k, v]) => row(k, when(v))), 'archive-steps'),
      a.receipt && a.receipt.content_hash ? h('div', {}, h('h4', { text: 'Receipt' }), h('p', { text: 'content hash ' + a.receipt.content_hash }), json(a.receipt)) : h('p', { text: 'no receipt yet: the archive has not finished' }),
      r ? table('Re-hydration steps done', ['Step', 'At'], Object.entries(r.steps || {}).map(([k, v]) => row(k, when(v))), 'rehydration-steps') : ''));
  }

  // Who did what: the tenant's admin_audit and the platform's tenant_audit.
  pages.audit = async (page) => {
    const admin = h('section', { id: 'audit-admin' }, h('h3', { text: "This tenant's admin actions (admin_audit)" }));
    const platform = h('section', { id: 'audit-platform' }, h('h3', { text: 'Platform actions (tenant_audit)' }));
    page.replaceChildren(h('h2', { text: 'Who did what' }), admin, platform);
    try {
      const a = await api('GET', '/v1/admin/audit?limit=200');
      admin.append(table(a.entries.length + ' entries, newest first', ['When', 'Who', 'Action', 'Target', 'Request'],
        a.entries.map((e) => row(when(e.at), e.subject, e.action, e.target, e.request_id || '')), 'audit-admin-table'));
    } catch (e) {
      const box = h('div');
      admin.append(box);
      fail(e, box);
    }
    try {
      const p = await api('GET', '/v1/platform/audit?limit=200');
      platform.append(table(p.entries.length + ' entries, newest first', ['When', 'Who', 'Action', 'Tenant', 'Detail', 'Request'],
        p.entries.map((e) => row(when(e.at), e.subject, e.action, e.tenant || '', JSON.stringify(e.detail), e.request_id || '')), 'audit-platform-table'));
    } catch (e) {
      const box = h('div');
      platform.append(box);
      fail(e, box);
    }
  };

  // ----- the router -----

  async function route() {
    stopTimers();
    $('alert').textContent = '';
    if (!token) return showLogin();
    $('login').hidden = true;
    $('nav').hidden = false;
    $('logout').hidden = false;
    const c = claims();
    $('who').textContent = 'signed in as ' + (c.sub || '?') + ' of tenant ' + (c.tenant || c.tid || '?') + (c.scope || c.scopes ? ', scopes ' + [].concat(c.scope || c.scopes).join(' ') : '') +
      (c.exp ? ', until ' + when(new Date(c.exp * 1000)) : '');
    let hash = location.hash.replace(/^#\/?/, '');
    if (!hash) hash = 'projections';
    const [path, qs] = hash.split('?');
    const [name, ...rest] = path.split('/');
    const fn = pages[name];
    const page = $('page');
    page.hidden = false;
    for (const a of document.querySelectorAll('#nav a')) {
      if (a.dataset.page === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    if (!fn) {
      page.replaceChildren(h('h2', { text: 'No such page' }), h('p', {}, h('a', { href: '#/projections', text: 'Projections' })));
      return;
    }
    page.replaceChildren(h('p', { class: 'muted', text: 'loading…' }));
    page.setAttribute('aria-busy', 'true');
    try {
      await fn(page, rest, new URLSearchParams(qs || ''));
    } catch (e) {
      page.replaceChildren(h('h2', { text: name }));
      fail(e, page.appendChild(h('div')));
    } finally {
      page.removeAttribute('aria-busy');
      page.setAttribute('data-page', name);
    }
  }

  async function detectErasure() {
    try {
      const res = await fetch('/openapi.json', { cache: 'no-store' });
      const doc = await res.json();
      erasure = Object.keys(doc.paths || {}).some((p) => p.endsWith('/erasure'));
      archives = Object.keys(doc.paths || {}).some((p) => p.endsWith('/tenants/{id}/archive'));
    } catch (e) {
      erasure = false;
      archives = false;
    }
  }

  document.addEventListener('DOMContentLoaded', async () => {
    takeFragmentToken();
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = $('login-token').value.trim().replace(/^Bearer\s+/i, '');
      if (!v) return;
      sessionStorage.setItem(KEY, v);
      token = v;
      $('login-token').value = '';
      if (!location.hash || location.hash === '#') location.hash = '#/projections';
      else route();
    });
    $('logout').addEventListener('click', () => {
      sessionStorage.removeItem(KEY);
      token = null;
      say('logged out');
      showLogin();
    });
    window.addEventListener('hashchange', async () => {
      if (/^#token=/.test(location.hash)) takeFragmentToken();
      say('');
      await route();
      // A new page: keyboard and screen-reader users start at its content.
      if (token) $('main').focus({ preventScroll: true });
    });
    await detectErasure();
    route();
  });
})();
