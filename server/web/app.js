// The delayq dashboard (docs/server.md, "Dashboard"): plain JavaScript, no
// framework, no build step. It reads the /v1 API of the server that serves it
// and acts through it, with the same token.
//
// Every string that comes from the server (ids, types, payloads, errors) is
// user input: it is rendered with textContent only, never as HTML. The server
// also sends a Content-Security-Policy that allows scripts from /ui/ only.
//
// Stable hooks for tests and scripts: rows carry data-task-id / data-dead-id /
// data-schedule-id, buttons data-action ("cancel", "requeue", "purge",
// "remove-schedule"), next-run cells data-next-ms, and <main> carries
// data-loaded="true" once stats and the three lists were shown.
'use strict';

(() => {
  const token_key = 'delayq.token';
  const sample_ms = 2000;        // stats and health
  const list_ms = 10000;         // upcoming and dead letters (upcoming walks every task)
  const window_ms = 10 * 60000;  // what the charts show
  const confirm_ms = 4000;       // a second click within this confirms cancel or purge
  const counters = ['pending', 'ready', 'running', 'reserved', 'scheduled', 'fired',
                    'succeeded', 'failed', 'retried', 'died', 'cancelled'];
  const totals_shown = ['pending', 'ready', 'running', 'reserved', 'dead', 'scheduled',
                        'fired', 'succeeded', 'failed', 'retried', 'died', 'cancelled'];

  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(token_key) || '';
  let waiting_for_token = false;
  let loaded = {stats: false, upcoming: false, dead: false, schedules: false};
  const samples = [];  // {t, p50, p99, fired_rate, succeeded_rate} per stats answer
  let last_counts = null;  // {t, fired, succeeded} of the previous stats answer

  class unauthorized extends Error {}

  // ---------------------------------------------------------------- API

  async function api(method, path, body) {
    const headers = {};
    if (token) headers.Authorization = 'Bearer ' + token;
    const init = {method, headers, cache: 'no-store'};
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const sent = token;
    const res = await fetch(path, init);
    if (res.status === 401) {
      // A 401 to a request sent with an older token (a straggler after the
      // right one was entered) must not ask again.
      if (sent === token) ask_token();
      throw new unauthorized('unauthorized');
    }
    const text = await res.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch (e) {
      json = null;
    }
    if (!res.ok) {
      const what = json && json.error ? json.error + ': ' + (json.message || '') : 'HTTP ' + res.status;
      throw new Error(what);
    }
    return json;
  }

  const seg = (s) => encodeURIComponent(s);

  // ---------------------------------------------------------------- token

  // Asked once: the form stays until a token is entered, and polling waits
  // for it instead of asking again on every call.
  function ask_token() {
    if (waiting_for_token) return;
    waiting_for_token = true;
    $('token-error').hidden = !token;  // a token we had was refused
    $('token-form').hidden = false;
    $('forget-token').hidden = true;
    $('token-input').focus();
  }

  function use_token(t) {
    token = t;
    if (t) sessionStorage.setItem(token_key, t);
    else sessionStorage.removeItem(token_key);
    waiting_for_token = false;
    $('token-form').hidden = true;
    $('token-error').hidden = true;
    $('forget-token').hidden = !t;
    refresh_all();
  }

  // ---------------------------------------------------------------- formatting

  function element(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  // Control characters escaped, long values cut: a payload is shown, never run.
  function printable(s, max) {
    let out = '';
    for (const ch of String(s)) {
      const c = ch.codePointAt(0);
      if (c < 0x20 || c === 0x7f) out += c === 10 ? '\\n' : c === 9 ? '\\t' : '\\x' + c.toString(16).padStart(2, '0');
      else out += ch;
      if (out.length > max) return out.slice(0, max - 1) + '\u2026';
    }
    return out;
  }

  function span_ms(ms) {
    let s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return s + 's';
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    s %= 60;
    if (d) return d + 'd' + h + 'h';
    if (h) return h + 'h' + m + 'm';
    return m + 'm' + (s ? s + 's' : '');
  }

  function when_cell(epoch_ms) {
    const td = element('td');
    const dt = epoch_ms - Date.now();
    td.textContent = Math.abs(dt) < 1000 ? 'now' : dt > 0 ? 'in ' + span_ms(dt) : span_ms(dt) + ' ago';
    td.title = new Date(epoch_ms).toISOString();
    return td;
  }

  function show_message(text, is_error) {
    const m = $('message');
    m.textContent = text;
    m.className = is_error ? 'error' : 'ok';
    m.hidden = false;
  }

  function mark_loaded(part) {
    loaded[part] = true;
    if (loaded.stats && loaded.upcoming && loaded.dead && loaded.schedules)
      $('main').dataset.loaded = 'true';
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  }

  // ---------------------------------------------------------------- health and stats

  async function load_health() {
    const h = $('health');
    try {
      const res = await fetch('/healthz', {cache: 'no-store'});
      const ok = res.status === 200;
      h.dataset.state = ok ? 'ok' : 'down';
      h.textContent = ok ? 'store: ok' : 'store: unavailable';
    } catch (e) {
      h.dataset.state = 'down';
      h.textContent = 'server unreachable';
    }
  }

  async function load_stats() {
    const s = await api('GET', '/v1/stats');
    const server = s.server || {};
    const value = (name) => (name === 'reserved' ? server.reserved : s[name]);

    const cards = $('totals');
    cards.replaceChildren();
    for (const name of totals_shown) {
      const card = element('div', undefined, 'card');
      card.dataset.counter = name;
      card.append(element('div', value(name) ?? '-', 'value'), element('div', name, 'label'));
      cards.append(card);
    }

    const head = $('types-head');
    head.replaceChildren(element('th', 'type'), ...counters.map((c) => element('th', c, 'num')));
    const body = $('types-body');
    body.replaceChildren();
    const has_types = !!s.types && typeof s.types === 'object';
    const rows = has_types ? Object.keys(s.types).sort().map((t) => [t, s.types[t]])
                           : [['(all types)', Object.fromEntries(counters.map((c) => [c, value(c)]))]];
    for (const [type, counts] of rows) {
      const tr = element('tr');
      tr.dataset.type = type;
      tr.append(element('td', type, 'id'));
      for (const c of counters) tr.append(element('td', counts && counts[c] !== undefined ? counts[c] : '-', 'num'));
      body.append(tr);
    }
    const note = $('types-note');
    note.hidden = has_types && rows.length > 0;
    note.textContent = has_types ? 'No task types yet.'
                                 : 'This server reports totals only (no "types" in /v1/stats).';

    add_sample(s);
    draw_charts();
    mark_loaded('stats');
  }

  function add_sample(s) {
    const t = Date.now();
    const sample = {t, p50: (s.lateness_p50_us || 0) / 1000, p99: (s.lateness_p99_us || 0) / 1000,
                    fired_rate: null, succeeded_rate: null};
    // Rates from counter deltas; a counter that went down is a restarted server.
    if (last_counts && s.fired >= last_counts.fired && s.succeeded >= last_counts.succeeded) {
      const secs = (t - last_counts.t) / 1000;
      if (secs > 0) {
        sample.fired_rate = (s.fired - last_counts.fired) / secs;
        sample.succeeded_rate = (s.succeeded - last_counts.succeeded) / secs;
      }
    }
    last_counts = {t, fired: s.fired, succeeded: s.succeeded};
    samples.push(sample);
    while (samples.length && samples[0].t < t - window_ms) samples.shift();
  }

  // ---------------------------------------------------------------- charts

  function nice_max(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function draw_chart(canvas, series) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(w * dpr)) canvas.width = Math.round(w * dpr);
    if (canvas.height !== Math.round(h * dpr)) canvas.height = Math.round(h * dpr);
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const left = 44, right = 8, top = 8, bottom = 18;
    const pw = w - left - right, ph = h - top - bottom;
    const now = Date.now();
    let max = 0;
    for (const sr of series) for (const p of samples) if (p[sr.key] !== null) max = Math.max(max, p[sr.key]);
    max = nice_max(max);

    g.font = '11px sans-serif';
    g.fillStyle = '#667085';
    g.strokeStyle = '#e4e7ec';
    g.lineWidth = 1;
    g.textBaseline = 'middle';
    g.textAlign = 'right';
    for (const f of [0, 0.5, 1]) {
      const y = top + ph - f * ph;
      g.beginPath();
      g.moveTo(left, y + 0.5);
      g.lineTo(left + pw, y + 0.5);
      g.stroke();
      const label = max * f;
      g.fillText(label >= 10 || label === 0 ? String(Math.round(label)) : label.toPrecision(2), left - 4, y);
    }
    g.textBaseline = 'top';
    g.textAlign = 'center';
    for (let m = 10; m >= 0; m -= 2) {
      const x = left + pw - (m * 60000 / window_ms) * pw;
      g.fillText(m ? '-' + m + 'm' : 'now', Math.min(x, left + pw - 12), top + ph + 4);
    }

    for (const sr of series) {
      g.strokeStyle = sr.color;
      g.lineWidth = 1.5;
      g.beginPath();
      let prev_t = null;
      for (const p of samples) {
        const v = p[sr.key];
        if (v === null) {
          prev_t = null;
          continue;
        }
        const x = left + pw - ((now - p.t) / window_ms) * pw;
        const y = top + ph - (v / max) * ph;
        // A gap (the tab slept, the server did not answer) is not drawn over.
        if (prev_t === null || p.t - prev_t > 3 * sample_ms) g.moveTo(x, y);
        else g.lineTo(x, y);
        prev_t = p.t;
      }
      g.stroke();
    }
  }

  function draw_charts() {
    for (const id of ['chart-lateness', 'chart-throughput']) $(id).dataset.samples = String(samples.length);
    draw_chart($('chart-lateness'), [{key: 'p50', color: '#2563eb'}, {key: 'p99', color: '#ea580c'}]);
    draw_chart($('chart-throughput'),
               [{key: 'fired_rate', color: '#2563eb'}, {key: 'succeeded_rate', color: '#ea580c'}]);
  }

  // ---------------------------------------------------------------- lists

  function action_button(action, label) {
    const b = element('button', label);
    b.type = 'button';
    b.dataset.action = action;
    b.dataset.label = label;
    return b;
  }

  async function load_upcoming() {
    const r = await api('GET', '/v1/upcoming?limit=20');
    const body = $('upcoming-body');
    body.replaceChildren();
    for (const t of r.tasks) {
      const tr = element('tr');
      tr.dataset.taskId = t.id;
      const actions = element('td', undefined, 'actions');
      actions.append(action_button('cancel', 'Cancel'));
      tr.append(element('td', printable(t.id, 60), 'id'), element('td', printable(t.type, 40)),
                when_cell(t.due_ms), element('td', t.attempts, 'num'),
                element('td', printable(t.payload, 80), 'payload'), actions);
      body.append(tr);
    }
    $('upcoming-empty').hidden = r.tasks.length > 0;
    $('upcoming').hidden = r.tasks.length === 0;
    $('upcoming-count').textContent = r.tasks.length < 20 ? '(' + r.tasks.length + ')' : '(first 20)';
    mark_loaded('upcoming');
  }

  async function load_dead() {
    const r = await api('GET', '/v1/dead?limit=100');
    const body = $('dead-body');
    body.replaceChildren();
    for (const d of r.dead) {
      const tr = element('tr');
      tr.dataset.deadId = d.id;
      const actions = element('td', undefined, 'actions');
      actions.append(action_button('requeue', 'Requeue'), action_button('purge', 'Purge'));
      tr.append(element('td', printable(d.id, 60), 'id'), element('td', printable(d.type, 40)),
                when_cell(d.died_ms), element('td', d.attempts, 'num'),
                element('td', printable(d.error, 80), 'error-text'),
                element('td', printable(d.payload, 60), 'payload'), actions);
      body.append(tr);
    }
    $('dead-empty').hidden = r.dead.length > 0;
    $('dead').hidden = r.dead.length === 0;
    $('dead-count').textContent =
        r.total > r.dead.length ? '(' + r.dead.length + ' of ' + r.total + ')' : '(' + r.total + ')';
    mark_loaded('dead');
  }

  // A schedule's next runs: relative times, the instant on hover.
  function next_cell(next) {
    const td = element('td', undefined, 'next');
    if (!next.length) td.textContent = 'none (ended)';
    next.forEach((ms, i) => {
      const dt = ms - Date.now();
      const s = element('span', (i ? ', ' : '') + (dt > 0 ? 'in ' + span_ms(dt) : 'now'));
      s.title = new Date(ms).toISOString();
      s.dataset.nextMs = String(ms);
      td.append(s);
    });
    return td;
  }

  async function load_schedules() {
    const r = await api('GET', '/v1/schedules?limit=100&next=3');
    const body = $('schedules-body');
    body.replaceChildren();
    for (const s of r.schedules) {
      const tr = element('tr');
      tr.dataset.scheduleId = s.id;
      const when = s.cron !== undefined ? s.cron + ' (' + s.timezone + ')'
                                        : 'every ' + span_ms(s.every_ms);
      const actions = element('td', undefined, 'actions');
      actions.append(action_button('remove-schedule', 'Remove'));
      tr.append(element('td', printable(s.id, 60), 'id'), element('td', printable(s.type, 40)),
                element('td', printable(when, 60)), next_cell(s.next_due_ms),
                element('td', s.missed), actions);
      body.append(tr);
    }
    $('schedules-empty').hidden = r.schedules.length > 0;
    $('schedules').hidden = r.schedules.length === 0;
    $('schedules-count').textContent = r.total > r.schedules.length
        ? '(' + r.schedules.length + ' of ' + r.total + ')' : '(' + r.total + ')';
    mark_loaded('schedules');
  }

  // ---------------------------------------------------------------- actions

  const actions = {
    cancel: (id) => api('DELETE', '/v1/tasks/' + seg(id)).then(() => 'Cancelled task ' + id),
    requeue: (id) => api('POST', '/v1/dead/' + seg(id) + '/requeue', {}).then(() => 'Requeued ' + id),
    purge: (id) => api('DELETE', '/v1/dead/' + seg(id)).then(() => 'Purged dead letter ' + id),
    'remove-schedule': (id) =>
        api('DELETE', '/v1/schedules/' + seg(id)).then(() => 'Removed schedule ' + id),
  };
  const needs_confirm = {cancel: true, purge: true, 'remove-schedule': true};

  async function on_action(ev) {
    const button = ev.target.closest('button[data-action]');
    if (!button || button.disabled) return;
    const row = button.closest('tr');
    const id = row && (row.dataset.taskId ?? row.dataset.deadId ?? row.dataset.scheduleId);
    const act = actions[button.dataset.action];
    if (id === undefined || !act) return;
    // Destructive actions take a second click; the first one arms the button.
    if (needs_confirm[button.dataset.action] && button.dataset.armed !== 'true') {
      button.dataset.armed = 'true';
      button.textContent = 'Sure?';
      setTimeout(() => {
        button.dataset.armed = 'false';
        button.textContent = button.dataset.label;
      }, confirm_ms);
      return;
    }
    button.disabled = true;
    try {
      show_message(await act(id), false);
    } catch (e) {
      if (!(e instanceof unauthorized)) show_message(e.message, true);
    } finally {
      button.disabled = false;  // the lists are drawn again below, unless the server is gone
    }
    await refresh_all();
  }

  // ---------------------------------------------------------------- polling

  async function guarded(fn) {
    try {
      await fn();
    } catch (e) {
      if (!(e instanceof unauthorized)) show_message(e.message, true);
    }
  }

  async function refresh_all() {
    await Promise.all([load_health(), guarded(load_stats), guarded(load_upcoming),
                       guarded(load_dead), guarded(load_schedules)]);
  }

  // setTimeout chains rather than setInterval: a slow answer never piles up calls.
  async function stats_loop() {
    await load_health();
    if (!waiting_for_token) await guarded(load_stats);
    setTimeout(stats_loop, sample_ms);
  }

  async function list_loop() {
    if (!waiting_for_token)
      await Promise.all([guarded(load_upcoming), guarded(load_dead), guarded(load_schedules)]);
    setTimeout(list_loop, list_ms);
  }

  function start() {
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      use_token($('token-input').value.trim());
    });
    $('forget-token').addEventListener('click', () => {
      sessionStorage.removeItem(token_key);
      token = '';
      ask_token();
    });
    $('refresh').addEventListener('click', refresh_all);
    $('upcoming-body').addEventListener('click', on_action);
    $('dead-body').addEventListener('click', on_action);
    $('schedules-body').addEventListener('click', on_action);
    $('forget-token').hidden = !token;
    window.addEventListener('resize', draw_charts);
    stats_loop();
    list_loop();
  }

  start();
})();
