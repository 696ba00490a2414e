#!/usr/bin/env node
// bench/peers/http_peers.js - table 3 of the peer benchmark (issue 32):
// BullMQ 5 against delayq-server's HTTP API, on the same redis-server, from
// the same Node.js process. bench/peers/peers.py starts delayq-server (on
// that Redis) and runs this with NODE_PATH pointing at the node_modules that
// `npm ci` made from bench/peers/node/package-lock.json.
//
//   node http_peers.js --delayq http://127.0.0.1:PORT --delayq-pid PID
//       --redis-port PORT --redis-pid PID --out FILE
//       [--quick] [--rounds N] [--worker-mode auto|plain|next|both] [--clk-tck N]
//
// Each round runs every scenario on both systems, BullMQ first in even
// rounds and delayq first in odd ones. The scenarios (sizes for the full
// run; --quick shrinks them):
//   floor   delayq only: 5,000 sequential GET /healthz through the agent
//           the one-connection adds use (Node's own HTTP client's ceiling)
//   add-1   5,000 adds one at a time on one connection (BullMQ: Queue.add
//           awaited; delayq: POST /v1/tasks on a keep-alive agent with one
//           socket), each due in 1 h
//   add-32  20,000 adds, 32 in flight (BullMQ: its one ioredis connection,
//           commands pipelined; delayq: 32 keep-alive sockets), due in 1 h;
//           Redis's used_memory before and after gives bytes per delayed job
//   burst   20,000 jobs due at one instant, run by 32 workers (BullMQ:
//           Worker concurrency 32; delayq: 32 loops of reserve max 1 and
//           finish); jobs per second from the due instant to the last
//           completion
//   late    20,000 jobs due uniformly over 5 s, the same 32 workers; the
//           lateness of each: when the worker has it minus its due time
// Every job is a no-op, removed when it completes (BullMQ removeOnComplete
// and removeOnFail, delayq's finish); the add rows' jobs are removed after
// each round (BullMQ obliterate, delayq DELETE), untimed.
//
// delayq's workers in one round trip: `POST /v1/tasks/{id}/finish` with
// `"next": {reserve arguments}` answers with the next tasks (issue 32). A
// probe at start (a finish with `next` for a task that does not exist)
// tells whether the server takes it: 400 "unknown field next" means no, and
// the run says so and uses plain finish. `auto` uses next when the server
// has it; `both` measures the burst and lateness both ways.
'use strict';

const events = require('events');
const fs = require('fs');
const http = require('http');
const { performance } = require('perf_hooks');
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

function parseArgs(argv) {
  const a = { workerMode: 'auto', quick: false, rounds: 0, clkTck: 100 };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    if (k === '--delayq') a.delayq = v();
    else if (k === '--delayq-pid') a.delayqPid = Number(v());
    else if (k === '--redis-port') a.redisPort = Number(v());
    else if (k === '--redis-pid') a.redisPid = Number(v());
    else if (k === '--out') a.out = v();
    else if (k === '--quick') a.quick = true;
    else if (k === '--rounds') a.rounds = Number(v());
    else if (k === '--worker-mode') a.workerMode = v();
    else if (k === '--clk-tck') a.clkTck = Number(v());
    else throw new Error(`unknown argument ${k}`);
  }
  for (const need of ['delayq', 'redisPort', 'out'])
    if (a[need] === undefined) throw new Error(`--${need.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())} is required`);
  if (!['auto', 'plain', 'next', 'both'].includes(a.workerMode)) throw new Error(`--worker-mode ${a.workerMode}?`);
  return a;
}

const A = parseArgs(process.argv);
const CFG = A.quick
  ? { rounds: 1, seq: 300, warm: 30, par: 1000, inFlight: 32, burst: 1000, late: 1000, spreadMs: 500, workers: 32 }
  : { rounds: 3, seq: 5000, warm: 200, par: 20000, inFlight: 32, burst: 20000, late: 20000, spreadMs: 5000, workers: 32 };
if (A.rounds) CFG.rounds = A.rounds;
const HOUR = 3600 * 1000;
const PAYLOAD = 'x'.repeat(16); // the same 16 bytes of job data on both sides
const JOB_OPTS = { removeOnComplete: true, removeOnFail: true };
const target = new URL(A.delayq);
const HOST = target.hostname;
const PORT = Number(target.port);
const REDIS = { host: '127.0.0.1', port: A.redisPort };

const t00 = Date.now();
const say = (m) => process.stderr.write(`http-peers [${((Date.now() - t00) / 1000).toFixed(1).padStart(6)} s]: ${m}\n`);
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

// --- measuring ---------------------------------------------------------------

function cpuSeconds(pid) {
  if (!pid) return 0;
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / A.clkTck;
}

// CPU seconds of delayq-server, redis-server and this process over a span.
function usage(withDelayq) {
  const d0 = withDelayq ? cpuSeconds(A.delayqPid) : 0;
  const r0 = cpuSeconds(A.redisPid);
  const c0 = process.cpuUsage();
  return () => {
    const c = process.cpuUsage(c0);
    const out = {
      redis_cpu_s: +(cpuSeconds(A.redisPid) - r0).toFixed(3),
      client_cpu_s: +((c.user + c.system) / 1e6).toFixed(3),
    };
    if (withDelayq) out.server_cpu_s = +(cpuSeconds(A.delayqPid) - d0).toFixed(3);
    return out;
  };
}

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

async function usedMemory(mon) {
  const m = /used_memory:(\d+)/.exec(await mon.info('memory'));
  if (!m) throw new Error('INFO memory without used_memory');
  return Number(m[1]);
}

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

// --- delayq over HTTP ---------------------------------------------------------

function call(agent, method, path, body, signal) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const headers = data === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) };
    const req = http.request({ host: HOST, port: PORT, method, path, agent, headers, signal }, (res) => {
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

const addTask = (agent, type, timing) =>
  call(agent, 'POST', '/v1/tasks', { type, payload: PAYLOAD, ...timing }).then((r) => expect(r, 201, 'POST /v1/tasks').id);

async function removeTasks(agent, ids) {
  await pool(CFG.inFlight, ids.length, async (k) => {
    expect(await call(agent, 'DELETE', `/v1/tasks/${encodeURIComponent(ids[k])}`), 204, 'DELETE /v1/tasks/{id}');
  });
}

// Does `finish` take "next"? (A finish for a task that does not exist: a
// server without it refuses the field before looking at the task.)
async function probeNext(agent) {
  const r = await call(agent, 'POST', '/v1/tasks/peers-probe-next/finish', {
    lease: 'peers-probe',
    next: { max: 1, wait_ms: 0 },
  });
  const answer = `${r.status} ${r.text.slice(0, 200)}`;
  if (r.status === 400 && /unknown field \\?"next\\?"/.test(r.text)) return { supported: false, answer };
  if (r.status === 409 || r.status === 404) return { supported: true, answer };
  return { supported: false, unclear: true, answer };
}

// One delayq worker: reserve (max 1, long poll), run the no-op job, finish;
// in mode 'next' the finish carries the next reserve (wait_ms 0, as
// BullMQ's moveToFinished fetches the next job without blocking) and an
// empty answer falls back to a long-poll reserve.
async function delayqWorker(agent, type, mode, st) {
  let have = [];
  while (!st.stop) {
    if (!have.length) {
      let r;
      try {
        r = await call(agent, 'POST', '/v1/reserve', { types: [type], max: 1, wait_ms: 1000 }, st.abort.signal);
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
      const r = await call(agent, 'POST', path, { lease: t.lease, next: { types: [type], max: 1, wait_ms: 0 } });
      const body = expect(r, 200, 'finish with next');
      const next = body && (body.tasks || (body.next && body.next.tasks));
      if (!Array.isArray(next)) throw new Error(`finish with next: no tasks in the answer: ${r.text.slice(0, 200)}`);
      have = next;
    } else {
      expect(await call(agent, 'POST', path, { lease: t.lease }), 204, 'finish');
    }
    st.onDone();
  }
}

// --- the scenarios -------------------------------------------------------------

// state shared by the workers of a burst or lateness run: N jobs to see.
function runState(n) {
  const st = { n, started: 0, done: 0, first: 0, last: 0, late: [], stop: false, abort: new AbortController() };
  // Every worker's long poll listens on this one signal.
  events.setMaxListeners(0, st.abort.signal);
  st.finished = new Promise((resolve) => (st.resolve = resolve));
  st.onStart = (due) => {
    const t = now();
    if (!st.started++) st.first = t;
    st.late.push(t - due);
  };
  st.onDone = () => {
    if (++st.done === st.n) {
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
    ...extra,
  };
}

const bull = {
  name: 'bullmq',
  queue: async (name) => {
    const q = new Queue(name, { connection: REDIS });
    await q.waitUntilReady();
    return q;
  },
  async drop(q) {
    await q.obliterate({ force: true });
    await q.close();
  },

  async add1(tag) {
    const q = await this.queue(`peers-${tag}-add1`);
    for (let i = 0; i < CFG.warm; i++) await q.add('j', PAYLOAD, { delay: HOUR, ...JOB_OPTS });
    const u = usage(false);
    const t0 = now();
    for (let i = 0; i < CFG.seq; i++) await q.add('j', PAYLOAD, { delay: HOUR, ...JOB_OPTS });
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.seq, seconds: +s.toFixed(4), per_s: CFG.seq / s, ...u() };
    await this.drop(q);
    return res;
  },

  async add32(tag, mon) {
    const q = await this.queue(`peers-${tag}-add32`);
    for (let i = 0; i < CFG.warm; i++) await q.add('j', PAYLOAD, { delay: HOUR, ...JOB_OPTS });
    const m0 = await usedMemory(mon);
    const u = usage(false);
    const t0 = now();
    await pool(CFG.inFlight, CFG.par, () => q.add('j', PAYLOAD, { delay: HOUR, ...JOB_OPTS }));
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.par, seconds: +s.toFixed(4), per_s: CFG.par / s, ...u() };
    res.memory_per_job_bytes = ((await usedMemory(mon)) - m0) / CFG.par;
    await this.drop(q);
    return res;
  },

  // n jobs, due(k) their due times (ms since the epoch); lead: the first due.
  async run(tag, n, dueOf, firstDue) {
    const name = `peers-${tag}`;
    const q = await this.queue(name);
    const st = runState(n);
    const w = new Worker(name, async (job) => st.onStart(job.timestamp + job.opts.delay), {
      connection: { ...REDIS, maxRetriesPerRequest: null },
      concurrency: CFG.workers,
    });
    let failure = null;
    w.on('completed', () => st.onDone());
    w.on('failed', (_job, err) => (failure = failure || err));
    w.on('error', (err) => (failure = failure || err));
    await w.waitUntilReady();
    const u = usage(false);
    await pool(CFG.inFlight, n, (k) => q.add('j', PAYLOAD, { delay: Math.max(0, dueOf(k) - Date.now()), ...JOB_OPTS }));
    const addsDone = now();
    await withTimeout(st.finished, 120000, `BullMQ ${tag}`);
    const extra = u();
    await w.close();
    await this.drop(q);
    if (failure) throw failure;
    return summary(st, firstDue, addsDone, extra);
  },
};

const delayq = {
  name: 'delayq',
  agent1: new http.Agent({ keepAlive: true, maxSockets: 1 }),
  agent32: new http.Agent({ keepAlive: true, maxSockets: CFG.inFlight }),
  agentWorkers: new http.Agent({ keepAlive: true, maxSockets: CFG.workers }),
  mode: 'plain',

  async floor() {
    for (let i = 0; i < CFG.warm; i++) expect(await call(this.agent1, 'GET', '/healthz'), 200, 'GET /healthz');
    const u = usage(true);
    const t0 = now();
    for (let i = 0; i < CFG.seq; i++) expect(await call(this.agent1, 'GET', '/healthz'), 200, 'GET /healthz');
    const s = (now() - t0) / 1000;
    return { ops: CFG.seq, seconds: +s.toFixed(4), per_s: CFG.seq / s, ...u() };
  },

  async add1(tag) {
    const type = `peers-${tag}-add1`;
    const ids = [];
    for (let i = 0; i < CFG.warm; i++) ids.push(await addTask(this.agent1, type, { delay_ms: HOUR }));
    const u = usage(true);
    const t0 = now();
    for (let i = 0; i < CFG.seq; i++) ids.push(await addTask(this.agent1, type, { delay_ms: HOUR }));
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.seq, seconds: +s.toFixed(4), per_s: CFG.seq / s, ...u() };
    await removeTasks(this.agent32, ids);
    return res;
  },

  async add32(tag, mon) {
    const type = `peers-${tag}-add32`;
    const ids = [];
    for (let i = 0; i < CFG.warm; i++) ids.push(await addTask(this.agent32, type, { delay_ms: HOUR }));
    const m0 = await usedMemory(mon);
    const u = usage(true);
    const t0 = now();
    await pool(CFG.inFlight, CFG.par, async () => ids.push(await addTask(this.agent32, type, { delay_ms: HOUR })));
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.par, seconds: +s.toFixed(4), per_s: CFG.par / s, ...u() };
    res.memory_per_job_bytes = ((await usedMemory(mon)) - m0) / CFG.par;
    await removeTasks(this.agent32, ids);
    return res;
  },

  async run(tag, n, dueOf, firstDue, mode) {
    const type = `peers-${tag}`;
    const st = runState(n);
    const workers = Array.from({ length: CFG.workers }, () => delayqWorker(this.agentWorkers, type, mode, st));
    // A worker that fails (an unexpected answer) fails the run at once.
    const failed = Promise.all(workers).then(() => null, (e) => e);
    const u = usage(true);
    await pool(CFG.inFlight, n, (k) => addTask(this.agent32, type, { due_ms: dueOf(k) }));
    const addsDone = now();
    const err = await withTimeout(Promise.race([st.finished.then(() => null), failed]), 120000, `delayq ${tag}`);
    st.stop = true;
    st.abort.abort();
    if (err) throw err;
    const extra = u();
    await Promise.allSettled(workers);
    return summary(st, firstDue, addsDone, { ...extra, worker_mode: mode });
  },
};

// Due times for a burst (all at one instant) and the lateness run (uniform
// over the spread), starting LEAD ms from now: long enough for the adds at
// the rate add-32 measured for that system this round, so every job is
// stored before the first is due (each summary records the margin).
function leadMs(addRate, n) {
  return Math.max(A.quick ? 300 : 1000, Math.ceil((1.5 * n) / addRate * 1000) + (A.quick ? 200 : 500));
}

async function main() {
  syncClock();
  const mon = new IORedis(REDIS);
  const probe = await probeNext(delayq.agent1);
  let modes;
  let note;
  if (A.workerMode === 'next' && !probe.supported)
    throw new Error(`--worker-mode next, but delayq-server does not take "next" in finish (it answered ${probe.answer})`);
  if (probe.supported) {
    modes = A.workerMode === 'both' ? ['plain', 'next'] : [A.workerMode === 'plain' ? 'plain' : 'next'];
    note = `delayq-server takes "next" in POST /v1/tasks/{id}/finish (the probe got ${probe.answer})`;
  } else {
    modes = ['plain'];
    note = probe.unclear
      ? `the probe of "next" in finish got an unexpected answer (${probe.answer}): measured with plain finish`
      : `delayq-server does not take "next" in POST /v1/tasks/{id}/finish yet (it answered ${probe.answer}): ` +
        'the one-round-trip worker is not measured; the workers reserve, then finish';
  }
  say(note);
  say(`delayq worker mode(s): ${modes.join(', ')}`);

  const rows = {};
  const put = (row, sys, fig) => ((rows[row] = rows[row] || {})[sys] = rows[row][sys] || []).push(fig);
  for (let r = 0; r < CFG.rounds; r++) {
    const order = r % 2 ? [delayq, bull] : [bull, delayq];
    const tag = (sys, what) => `r${r}-${sys.name}-${what}-${process.pid}`;
    say(`round ${r + 1}/${CFG.rounds}: ${order.map((s) => s.name).join(' then ')}`);
    const rates = {};
    for (const sys of order) {
      if (sys === delayq) put('floor', 'delayq', await delayq.floor());
      put('add-1', sys.name, await sys.add1(tag(sys, 'a')));
      const a32 = await sys.add32(tag(sys, 'b'), mon);
      rates[sys.name] = a32.per_s;
      put('add-32', sys.name, a32);
    }
    for (const [row, n, spread] of [['burst', CFG.burst, 0], ['late', CFG.late, CFG.spreadMs]]) {
      for (const sys of order) {
        for (const mode of sys === delayq ? modes : ['-']) {
          syncClock();
          const first = Math.ceil(Date.now() + leadMs(rates[sys.name], n));
          const dues = Array.from({ length: n }, () => first + Math.floor(Math.random() * spread));
          const label = sys === delayq && modes.length > 1 ? `delayq-${mode}` : sys.name;
          say(`round ${r + 1}: ${row} on ${label}: ${n} jobs, first due in ${first - Date.now()} ms`);
          put(row, label, await sys.run(tag(sys, row + mode), n, (k) => dues[k], spread ? Math.min(...dues) : first, mode));
        }
      }
    }
  }
  const medians = {};
  for (const [row, bySys] of Object.entries(rows)) {
    medians[row] = {};
    for (const [sys, figs] of Object.entries(bySys)) {
      const m = {};
      for (const k of Object.keys(figs[0])) if (typeof figs[0][k] === 'number') m[k] = median(figs.map((f) => f[k]));
      medians[row][sys] = m;
    }
  }
  const out = {
    config: CFG,
    payload_bytes: PAYLOAD.length,
    job_options: JOB_OPTS,
    worker_modes: modes,
    next_probe: probe,
    note,
    rows: Object.fromEntries(
      Object.entries(rows).map(([row, bySys]) => [
        row,
        Object.fromEntries(Object.entries(bySys).map(([sys, figs]) => [sys, { rounds: figs, median: medians[row][sys] }])),
      ]),
    ),
  };
  fs.writeFileSync(A.out, JSON.stringify(out, null, 2) + '\n');
  await mon.quit();
  for (const a of [delayq.agent1, delayq.agent32, delayq.agentWorkers]) a.destroy();
}

main().then(
  () => process.exit(0),
  (e) => {
    say(`failed: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  },
);
