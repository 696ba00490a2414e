// bench/peers/peer_kit.js - what the Node.js peer benchmarks share: the
// clock, CPU accounting, statistics, and delayq-server's side (its HTTP
// client, its workers, the add and run scenarios). http_peers.js (BullMQ, on
// Redis) and pg_peers.js (pg-boss and graphile-worker, on PostgreSQL) both
// measure delayq through this file, so its side is the same code in both.
'use strict';

const events = require('events');
const fs = require('fs');
const http = require('http');
const { performance } = require('perf_hooks');

const HOUR = 3600 * 1000;

// --- time ----------------------------------------------------------------------

// Milliseconds since the epoch, fractional: the clock due times are on
// (Date.now(), whole milliseconds) read through performance.now(). The
// offset is taken at a tick of Date.now() (so it is exact to a few µs) and
// again before each timed run, so the two clocks cannot drift apart.
let clockOffset = 0;
function syncClock() {
  const d0 = Date.now();
  let d = d0;
  while (d === d0) d = Date.now();
  clockOffset = d - performance.now();
}
const now = () => clockOffset + performance.now();

function logger(prefix) {
  const t00 = Date.now();
  return (m) => process.stderr.write(`${prefix} [${((Date.now() - t00) / 1000).toFixed(1).padStart(6)} s]: ${m}\n`);
}

// --- CPU -------------------------------------------------------------------------

// User + system CPU seconds of PID so far; with children, also what its
// reaped children used (PostgreSQL's backends are the postmaster's children).
function cpuSeconds(pid, clkTck, children = false) {
  if (!pid) return 0;
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  let ticks = Number(f[11]) + Number(f[12]);
  if (children) ticks += Number(f[13]) + Number(f[14]);
  return ticks / clkTck;
}

// CPU seconds of a process and all its children, live or reaped: a backend
// that exits during a span moves from the live sum to the parent's reaped
// sum, so the difference over the span stays right.
function treeCpuSeconds(pid, clkTck) {
  if (!pid) return 0;
  let total = cpuSeconds(pid, clkTck, true);
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let s;
    try {
      s = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    if (Number(f[1]) === pid) total += (Number(f[11]) + Number(f[12])) / clkTck;
  }
  return total;
}

// probes: { name_cpu_s: () => seconds }. Returns a function that gives each
// probe's CPU seconds over the span, and this process's own (client_cpu_s).
function usage(probes = {}) {
  const start = Object.fromEntries(Object.entries(probes).map(([k, f]) => [k, f()]));
  const c0 = process.cpuUsage();
  return () => {
    const c = process.cpuUsage(c0);
    const out = {};
    for (const [k, f] of Object.entries(probes)) out[k] = +(f() - start[k]).toFixed(3);
    out.client_cpu_s = +((c.user + c.system) / 1e6).toFixed(3);
    return out;
  };
}

// The CPU of a span that begins at the instant `at` (ms, now()'s clock):
// make() is started then. For a lateness row, whose adds come first: what
// the systems spend while the jobs fall due, with the keys suffixed
// `_after_due` (none when the span never began).
function usageFrom(make, at) {
  let span = null;
  const timer = setTimeout(() => (span = make()), Math.max(0, at - now()));
  return () => {
    clearTimeout(timer);
    if (!span) return {};
    return Object.fromEntries(Object.entries(span()).map(([k, v]) => [`${k}_after_due`, v]));
  };
}

// --- statistics --------------------------------------------------------------------

function percentile(sorted, p) {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

function median(xs) {
  const v = xs.filter((x) => x !== null && x !== undefined).sort((a, b) => a - b);
  if (!v.length) return null;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// rows[row][system] = [figures of each round] -> the JSON both scripts
// write: { row: { system: { rounds, median } } }, the median of every
// numeric field.
function withMedians(rows) {
  return Object.fromEntries(
    Object.entries(rows).map(([row, bySys]) => [
      row,
      Object.fromEntries(
        Object.entries(bySys).map(([sys, figs]) => {
          const m = {};
          for (const k of Object.keys(figs[0])) if (typeof figs[0][k] === 'number') m[k] = median(figs.map((f) => f[k]));
          return [sys, { rounds: figs, median: m }];
        }),
      ),
    ]),
  );
}

// --- concurrency ---------------------------------------------------------------------

// N async loops taking the next index until TOTAL were run.
async function pool(n, total, fn) {
  let next = 0;
  const loop = async () => {
    for (let k = next++; k < total; k = next++) await fn(k);
  };
  await Promise.all(Array.from({ length: Math.min(n, total) }, loop));
}

function withTimeout(promise, ms, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

// --- a burst or lateness run ------------------------------------------------------------

// The state shared by the workers of a run: N jobs to see. onStart(due) as a
// worker has a job (its lateness: now minus due), onDone() as it completed.
function runState(n) {
  const st = { n, started: 0, done: 0, first: 0, last: 0, late: [], stop: false, abort: new AbortController() };
  // Every delayq worker's long poll listens on this one signal.
  events.setMaxListeners(0, st.abort.signal);
  st.finished = new Promise((resolve) => (st.resolve = resolve));
  st.onStart = (due) => {
    const t = now();
    if (!st.started++) st.first = t;
    st.late.push(t - due);
  };
  st.onDone = (k = 1) => {
    st.done += k;
    if (st.done >= st.n && !st.stop) {
      st.last = now();
      st.stop = true;
      st.abort.abort();
      st.resolve();
    }
  };
  return st;
}

function summary(st, due0, addsDone, extra) {
  const late = st.late.slice().sort((a, b) => a - b);
  return {
    jobs: st.n,
    seconds: +((st.last - due0) / 1000).toFixed(4),
    per_s: st.n / ((st.last - due0) / 1000),
    first_after_due_ms: +(st.first - due0).toFixed(3),
    adds_done_before_due_ms: +(due0 - addsDone).toFixed(1),
    late_p50_ms: +percentile(late, 50).toFixed(3),
    late_p99_ms: +percentile(late, 99).toFixed(3),
    late_max_ms: +late[late.length - 1].toFixed(3),
    early: late.filter((x) => x < 0).length,
    // The earliest: how far before its due time (by this client's clock) a
    // job came, when one did.
    late_min_ms: +late[0].toFixed(3),
    ...extra,
  };
}

// Due times for a burst (all at one instant) and a lateness run (uniform
// over the spread) start this many ms from now: long enough for the adds at
// the rate add-32 measured for that system this round, so every job is
// stored before the first is due (each summary records the margin).
function leadMs(addRate, n, quick) {
  return Math.max(quick ? 300 : 1000, Math.ceil(((1.5 * n) / addRate) * 1000) + (quick ? 200 : 500));
}

// --- delayq over HTTP -------------------------------------------------------------------

function call(target, agent, method, path, body, signal) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const headers = data === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) };
    const req = http.request({ host: target.host, port: target.port, method, path, agent, headers, signal }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
}

function expect(r, status, what) {
  if (r.status !== status) throw new Error(`${what}: expected ${status}, got ${r.status} ${r.text.slice(0, 300)}`);
  return r.text ? JSON.parse(r.text) : null;
}

// delayq-server's side of a peer benchmark, over its HTTP API.
//   url      http://HOST:PORT
//   cfg      { seq, warm, par, inFlight, workers }
//   payload  the job body (a string)
//   probes   usage() probes of the servers' CPU (server_cpu_s, ...)
class delayq_http {
  constructor({ url, cfg, payload, probes }) {
    const u = new URL(url);
    this.name = 'delayq';
    this.target = { host: u.hostname, port: Number(u.port) };
    this.cfg = cfg;
    this.payload = payload;
    this.probes = probes || {};
    this.agent1 = new http.Agent({ keepAlive: true, maxSockets: 1 });
    this.agent32 = new http.Agent({ keepAlive: true, maxSockets: cfg.inFlight });
    this.agentWorkers = new http.Agent({ keepAlive: true, maxSockets: cfg.workers });
  }

  usage() {
    return usage(this.probes);
  }

  // How many of delayq-server's store writes so far took longer than 10 ms,
  // 100 ms and 1 s (its delayq_store_write_seconds histogram, GET /metrics),
  // or null when it cannot tell. A worker's finish waits for its write, so a
  // write that stalls holds every worker waiting on it: a lateness round
  // with a long tail says whether the store was the cause. On a connection
  // of its own: one of the agents' idle sockets may be closing meanwhile.
  async storeWrites() {
    let r;
    try {
      r = await call(this.target, false, 'GET', '/metrics', undefined, AbortSignal.timeout(5000));
    } catch {
      return null;
    }
    if (r.status !== 200) return null;
    const buckets = [];
    let count = null;
    for (const line of r.text.split('\n')) {
      const b = /^delayq_store_write_seconds_bucket\{le="([^"]+)"\} (\d+)/.exec(line);
      if (b) buckets.push([b[1] === '+Inf' ? Infinity : Number(b[1]), Number(b[2])]);
      const c = /^delayq_store_write_seconds_count (\d+)/.exec(line);
      if (c) count = Number(c[1]);
    }
    if (count === null) return null;
    // Writes above `s` seconds: those not in the bucket whose bound is s
    // (the bounds print as 0.01, 0.09999999999999999, 1, ...).
    const over = (s) => {
      const b = buckets.find(([le]) => Math.abs(le - s) < s * 1e-6);
      return b ? count - b[1] : null;
    };
    return { writes: count, over_10ms: over(0.01), over_100ms: over(0.1), over_1s: over(1) };
  }

  call(agent, method, path, body, signal) {
    return call(this.target, agent, method, path, body, signal);
  }

  addTask(agent, type, timing) {
    return this.call(agent, 'POST', '/v1/tasks', { type, payload: this.payload, ...timing }).then(
      (r) => expect(r, 201, 'POST /v1/tasks').id,
    );
  }

  async removeTasks(ids) {
    await pool(this.cfg.inFlight, ids.length, async (k) => {
      expect(await this.call(this.agent32, 'DELETE', `/v1/tasks/${encodeURIComponent(ids[k])}`), 204, 'DELETE /v1/tasks/{id}');
    });
  }

  // Does `finish` take "next"? (A finish for a task that does not exist: a
  // server without it refuses the field before looking at the task.)
  async probeNext() {
    const r = await this.call(this.agent1, 'POST', '/v1/tasks/peers-probe-next/finish', {
      lease: 'peers-probe',
      next: { max: 1, wait_ms: 0 },
    });
    const answer = `${r.status} ${r.text.slice(0, 200)}`;
    if (r.status === 400 && /unknown field \\?"next\\?"/.test(r.text)) return { supported: false, answer };
    if (r.status === 409 || r.status === 404) return { supported: true, answer };
    return { supported: false, unclear: true, answer };
  }

  // Does the server take POST /v1/tasks:finish? (A finish of a lease that
  // is no task's: 200 with a 409 result where it exists, 404 where not.)
  async probeBatchFinish() {
    const r = await this.call(this.agent1, 'POST', '/v1/tasks:finish', {
      tasks: [{ id: 'peers-probe-batch', lease: 'peers-probe' }],
    });
    return { supported: r.status === 200, answer: `${r.status} ${r.text.slice(0, 200)}` };
  }

  // Which worker modes to measure for a --worker-mode (auto, plain, next,
  // both, batch, or a comma list of plain, next and batch), and a sentence
  // saying why.
  async workerModes(want) {
    if (want.includes(',') || want === 'batch') {
      const modes = want.split(',');
      if (modes.includes('next') && !(await this.probeNext()).supported)
        throw new Error('--worker-mode next, but delayq-server does not take "next" in finish');
      const batch = modes.includes('batch') ? await this.probeBatchFinish() : null;
      if (batch && !batch.supported)
        throw new Error(`--worker-mode batch, but delayq-server has no POST /v1/tasks:finish (it answered ${batch.answer})`);
      return {
        probe: batch,
        modes,
        note:
          `delayq's workers in mode(s) ${modes.join(', ')}` +
          (batch ? `; batch: ${this.batchLoops()} loops, each reserving up to ${this.batchSize()} tasks and ` +
            'finishing them in one POST /v1/tasks:finish that carries the next reserve' : ''),
      };
    }
    const probe = await this.probeNext();
    if (want === 'next' && !probe.supported)
      throw new Error(`--worker-mode next, but delayq-server does not take "next" in finish (it answered ${probe.answer})`);
    if (probe.supported) {
      return {
        probe,
        modes: want === 'both' ? ['plain', 'next'] : [want === 'plain' ? 'plain' : 'next'],
        note: `delayq-server takes "next" in POST /v1/tasks/{id}/finish (the probe got ${probe.answer})`,
      };
    }
    return {
      probe,
      modes: ['plain'],
      note: probe.unclear
        ? `the probe of "next" in finish got an unexpected answer (${probe.answer}): measured with plain finish`
        : `delayq-server does not take "next" in POST /v1/tasks/{id}/finish yet (it answered ${probe.answer}): ` +
          'the one-round-trip worker is not measured; the workers reserve, then finish',
    };
  }

  // Node's own ceiling: sequential GET /healthz through the one-socket agent.
  async floor() {
    for (let i = 0; i < this.cfg.warm; i++) expect(await this.call(this.agent1, 'GET', '/healthz'), 200, 'GET /healthz');
    const u = this.usage();
    const t0 = now();
    for (let i = 0; i < this.cfg.seq; i++) expect(await this.call(this.agent1, 'GET', '/healthz'), 200, 'GET /healthz');
    const s = (now() - t0) / 1000;
    return { ops: this.cfg.seq, seconds: +s.toFixed(4), per_s: this.cfg.seq / s, ...u() };
  }

  // Node's own ceiling with cfg.inFlight at once: cfg.par GET /healthz
  // through the agent the 32-in-flight adds use. A request that does
  // nothing, so what it costs is the client's and the HTTP exchange's: on a
  // machine whose cores the client, the server and Redis share, no add
  // through this agent can go faster.
  async floor32() {
    for (let i = 0; i < this.cfg.warm; i++) expect(await this.call(this.agent32, 'GET', '/healthz'), 200, 'GET /healthz');
    const u = this.usage();
    const t0 = now();
    await pool(this.cfg.inFlight, this.cfg.par, async () =>
      expect(await this.call(this.agent32, 'GET', '/healthz'), 200, 'GET /healthz'));
    const s = (now() - t0) / 1000;
    return { ops: this.cfg.par, seconds: +s.toFixed(4), per_s: this.cfg.par / s, ...u() };
  }

  // cfg.seq adds one at a time on one connection, due in 1 h.
  async add1(tag) {
    const type = `peers-${tag}-add1`;
    const ids = [];
    for (let i = 0; i < this.cfg.warm; i++) ids.push(await this.addTask(this.agent1, type, { delay_ms: HOUR }));
    const u = this.usage();
    const t0 = now();
    for (let i = 0; i < this.cfg.seq; i++) ids.push(await this.addTask(this.agent1, type, { delay_ms: HOUR }));
    const s = (now() - t0) / 1000;
    const res = { ops: this.cfg.seq, seconds: +s.toFixed(4), per_s: this.cfg.seq / s, ...u() };
    await this.removeTasks(ids);
    return res;
  }

  // cfg.par adds, cfg.inFlight at once, due in 1 h. footprint (optional):
  // { key, read: async () => bytes, prepare: async () => {} }: read before
  // and after the adds (prepare first, untimed), the growth per job is
  // res[key].
  async add32(tag, footprint) {
    const type = `peers-${tag}-add32`;
    const ids = [];
    for (let i = 0; i < this.cfg.warm; i++) ids.push(await this.addTask(this.agent32, type, { delay_ms: HOUR }));
    if (footprint && footprint.prepare) await footprint.prepare();
    const m0 = footprint ? await footprint.read() : 0;
    const u = this.usage();
    const t0 = now();
    await pool(this.cfg.inFlight, this.cfg.par, async () => ids.push(await this.addTask(this.agent32, type, { delay_ms: HOUR })));
    const s = (now() - t0) / 1000;
    const res = { ops: this.cfg.par, seconds: +s.toFixed(4), per_s: this.cfg.par / s, ...u() };
    if (footprint) res[footprint.key] = ((await footprint.read()) - m0) / this.cfg.par;
    await this.removeTasks(ids);
    return res;
  }

  // One worker: reserve (max 1, long poll), run the no-op job, finish; in
  // mode 'next' the finish carries the next reserve (wait_ms 0) and an empty
  // answer falls back to a long-poll reserve.
  async worker(type, mode, st) {
    const agent = this.agentWorkers;
    let have = [];
    while (!st.stop) {
      if (!have.length) {
        let r;
        try {
          r = await this.call(agent, 'POST', '/v1/reserve', { types: [type], max: 1, wait_ms: 1000 }, st.abort.signal);
        } catch (e) {
          if (st.stop) return;
          throw e;
        }
        have = expect(r, 200, 'POST /v1/reserve').tasks;
        continue;
      }
      const t = have.shift();
      st.onStart(t.due_ms);
      const path = `/v1/tasks/${encodeURIComponent(t.id)}/finish`;
      if (mode === 'next') {
        const r = await this.call(agent, 'POST', path, { lease: t.lease, next: { types: [type], max: 1, wait_ms: 0 } });
        const body = expect(r, 200, 'finish with next');
        const next = body && (body.tasks || (body.next && body.next.tasks));
        if (!Array.isArray(next)) throw new Error(`finish with next: no tasks in the answer: ${r.text.slice(0, 200)}`);
        have = next;
      } else {
        expect(await this.call(agent, 'POST', path, { lease: t.lease }), 204, 'finish');
      }
      st.onDone();
    }
  }

  // Batch mode: cfg.workers jobs at once as batchLoops() loops of
  // batchSize() (pg-boss's split: localConcurrency x batchSize).
  batchSize() {
    return this.cfg.batch || 8;
  }

  batchLoops() {
    return Math.max(1, Math.round(this.cfg.workers / this.batchSize()));
  }

  // One batch worker: reserve up to batchSize() (long poll), run the no-op
  // jobs, finish them all in one POST /v1/tasks:finish whose "next" takes
  // the next batch (wait_ms 0; an empty answer falls back to a long poll).
  // A job is done when the call that finished it answered.
  async batchWorker(type, st) {
    const agent = this.agentWorkers;
    const max = this.batchSize();
    let have = [];
    while (!st.stop) {
      if (!have.length) {
        let r;
        try {
          r = await this.call(agent, 'POST', '/v1/reserve', { types: [type], max, wait_ms: 1000 }, st.abort.signal);
        } catch (e) {
          if (st.stop) return;
          throw e;
        }
        have = expect(r, 200, 'POST /v1/reserve').tasks;
        continue;
      }
      for (const t of have) st.onStart(t.due_ms);
      const r = await this.call(agent, 'POST', '/v1/tasks:finish', {
        tasks: have.map((t) => ({ id: t.id, lease: t.lease })),
        next: { types: [type], max, wait_ms: 0 },
      });
      const body = expect(r, 200, 'POST /v1/tasks:finish');
      const results = body && body.results;
      if (!Array.isArray(results) || results.length !== have.length || results.some((x) => x.status !== 204))
        throw new Error(`tasks:finish: not every finish answered 204: ${r.text.slice(0, 300)}`);
      if (!Array.isArray(body.tasks)) throw new Error(`tasks:finish with next: no tasks in the answer: ${r.text.slice(0, 200)}`);
      for (let i = 0; i < have.length; i++) st.onDone();
      have = body.tasks;
    }
  }

  // n jobs due at dueOf(k) (ms since the epoch), added cfg.inFlight at once
  // while cfg.workers workers already wait; firstDue: the earliest.
  async run(tag, n, dueOf, firstDue, mode) {
    const type = `peers-${tag}`;
    const st = runState(n);
    const workers =
      mode === 'batch'
        ? Array.from({ length: this.batchLoops() }, () => this.batchWorker(type, st))
        : Array.from({ length: this.cfg.workers }, () => this.worker(type, mode, st));
    // A worker that fails (an unexpected answer) fails the run at once.
    const failed = Promise.all(workers).then(() => null, (e) => e);
    const w0 = await this.storeWrites();
    const u = this.usage();
    const ud = usageFrom(() => this.usage(), firstDue);
    await pool(this.cfg.inFlight, n, (k) => this.addTask(this.agent32, type, { due_ms: dueOf(k) }));
    const addsDone = now();
    const err = await withTimeout(Promise.race([st.finished.then(() => null), failed]), 120000, `delayq ${tag}`);
    st.stop = true;
    st.abort.abort();
    if (err) throw err;
    const extra = { ...u(), ...ud() };
    await Promise.allSettled(workers);
    // The row's store writes (its adds included) slower than 10 ms, 100 ms, 1 s.
    const w1 = await this.storeWrites();
    if (w0 && w1) {
      for (const k of ['writes', 'over_10ms', 'over_100ms', 'over_1s'])
        if (w0[k] !== null && w1[k] !== null) extra[`store_${k}`] = w1[k] - w0[k];
    } else {
      extra.store_writes_unread = true;  // /metrics did not answer as expected: said, not left out
    }
    return summary(st, firstDue, addsDone, { ...extra, worker_mode: mode });
  }

  close() {
    for (const a of [this.agent1, this.agent32, this.agentWorkers]) a.destroy();
  }
}

module.exports = {
  HOUR,
  syncClock,
  now,
  logger,
  cpuSeconds,
  treeCpuSeconds,
  usage,
  usageFrom,
  percentile,
  median,
  withMedians,
  pool,
  withTimeout,
  runState,
  summary,
  leadMs,
  delayq_http,
};
