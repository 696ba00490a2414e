#!/usr/bin/env node
// bench/peers/http_peers.js - table 3 of the peer benchmark (issue 32):
// BullMQ 5 against delayq-server's HTTP API, on the same redis-server, from
// the same Node.js process. bench/peers/peers.py starts delayq-server (on
// that Redis) and runs this with NODE_PATH pointing at the node_modules that
// `npm ci` made from bench/peers/node/package-lock.json.
//
//   node http_peers.js --delayq http://127.0.0.1:PORT --delayq-pid PID
//       --redis-port PORT --redis-pid PID --out FILE
//       [--quick] [--rounds N] [--worker-mode auto|plain|next|both|batch|LIST] [--clk-tck N]
//
// Each round runs every scenario on both systems, BullMQ first in even
// rounds and delayq first in odd ones. The scenarios (sizes for the full
// run; --quick shrinks them):
//   floor   delayq only: 5,000 sequential GET /healthz through the agent
//           the one-connection adds use (Node's own HTTP client's ceiling)
//   floor-32  delayq only: 20,000 GET /healthz, 32 in flight, through the
//           agent of the 32-in-flight adds (the same ceiling, for add-32)
//   redis-rtt  5,000 sequential SETs by redis-benchmark (one C client) to
//           the same redis-server: with the floor, the bound of add-1
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

const fs = require('fs');
const { execFileSync } = require('child_process');
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');
const kit = require('./peer_kit');

const { HOUR, now, pool, withTimeout, runState, summary } = kit;

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
  const modeOk = ['auto', 'both'].includes(a.workerMode) || a.workerMode.split(',').every((m) => ['plain', 'next', 'batch'].includes(m));
  if (!modeOk) throw new Error(`--worker-mode ${a.workerMode}?`);
  return a;
}

const A = parseArgs(process.argv);
const CFG = A.quick
  ? { rounds: 1, seq: 300, warm: 30, par: 1000, inFlight: 32, burst: 1000, late: 1000, spreadMs: 500, workers: 32, batch: 8 }
  : { rounds: 3, seq: 5000, warm: 200, par: 20000, inFlight: 32, burst: 20000, late: 20000, spreadMs: 5000, workers: 32, batch: 8 };
if (A.rounds) CFG.rounds = A.rounds;
const PAYLOAD = 'x'.repeat(16); // the same 16 bytes of job data on both sides
const JOB_OPTS = { removeOnComplete: true, removeOnFail: true };
const REDIS = { host: '127.0.0.1', port: A.redisPort };

const say = kit.logger('http-peers');
const redisCpu = () => kit.cpuSeconds(A.redisPid, A.clkTck);
// CPU seconds of redis-server and this process over a span (BullMQ's side).
const usage = () => kit.usage({ redis_cpu_s: redisCpu });

async function usedMemory(mon) {
  const m = /used_memory:(\d+)/.exec(await mon.info('memory'));
  if (!m) throw new Error('INFO memory without used_memory');
  return Number(m[1]);
}

// --- the scenarios -------------------------------------------------------------

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
    const u = usage();
    const t0 = now();
    for (let i = 0; i < CFG.seq; i++) await q.add('j', PAYLOAD, { delay: HOUR, ...JOB_OPTS });
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.seq, seconds: +s.toFixed(4), per_s: CFG.seq / s, ...u() };
    await this.drop(q);
    return res;
  },

  async add32(tag, footprint) {
    const q = await this.queue(`peers-${tag}-add32`);
    for (let i = 0; i < CFG.warm; i++) await q.add('j', PAYLOAD, { delay: HOUR, ...JOB_OPTS });
    const m0 = await footprint.read();
    const u = usage();
    const t0 = now();
    await pool(CFG.inFlight, CFG.par, () => q.add('j', PAYLOAD, { delay: HOUR, ...JOB_OPTS }));
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.par, seconds: +s.toFixed(4), per_s: CFG.par / s, ...u() };
    res[footprint.key] = ((await footprint.read()) - m0) / CFG.par;
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
    const u = usage();
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

// delayq-server's side: peer_kit.js, the same code pg_peers.js uses.
const delayq = new kit.delayq_http({
  url: A.delayq,
  cfg: CFG,
  payload: PAYLOAD,
  probes: { server_cpu_s: () => kit.cpuSeconds(A.delayqPid, A.clkTck), redis_cpu_s: redisCpu },
});

const leadMs = (addRate, n) => kit.leadMs(addRate, n, A.quick);

// One Redis round trip, alone: cfg.seq sequential SETs from a C client
// (redis-benchmark, hiredis, as delayq-server's) to the same redis-server.
// An add through delayq-server is Node's HTTP round trip (the floor) and at
// least one such round trip more (the 201 waits for Redis): their sum
// bounds the one-connection add row.
function redisRtt() {
  const out = execFileSync('redis-benchmark', ['-p', String(A.redisPort), '-c', '1', '-n', String(CFG.seq),
    '-t', 'set', '--csv'], { encoding: 'utf8' });
  const m = out.match(/^"SET","([0-9.]+)","([0-9.]+)"/m);
  if (!m) throw new Error(`redis-benchmark: no SET line in ${JSON.stringify(out.slice(0, 300))}`);
  return { ops: CFG.seq, per_s: Number(m[1]), avg_ms: Number(m[2]) };
}

async function main() {
  kit.syncClock();
  const mon = new IORedis(REDIS);
  const { probe, modes, note } = await delayq.workerModes(A.workerMode);
  say(note);
  say(`delayq worker mode(s): ${modes.join(', ')}`);

  const rows = {};
  const put = (row, sys, fig) => ((rows[row] = rows[row] || {})[sys] = rows[row][sys] || []).push(fig);
  const memory = { key: 'memory_per_job_bytes', read: () => usedMemory(mon) };
  for (let r = 0; r < CFG.rounds; r++) {
    const order = r % 2 ? [delayq, bull] : [bull, delayq];
    const tag = (sys, what) => `r${r}-${sys.name}-${what}-${process.pid}`;
    say(`round ${r + 1}/${CFG.rounds}: ${order.map((s) => s.name).join(' then ')}`);
    const rates = {};
    for (const sys of order) {
      if (sys === delayq) put('floor', 'delayq', await delayq.floor());
      if (sys === delayq) put('floor-32', 'delayq', await delayq.floor32());
      if (sys === delayq) put('redis-rtt', 'delayq', redisRtt());
      put('add-1', sys.name, await sys.add1(tag(sys, 'a')));
      const a32 = await sys.add32(tag(sys, 'b'), memory);
      rates[sys.name] = a32.per_s;
      put('add-32', sys.name, a32);
    }
    for (const [row, n, spread] of [['burst', CFG.burst, 0], ['late', CFG.late, CFG.spreadMs]]) {
      for (const sys of order) {
        for (const mode of sys === delayq ? modes : ['-']) {
          kit.syncClock();
          const first = Math.ceil(Date.now() + leadMs(rates[sys.name], n));
          const dues = Array.from({ length: n }, () => first + Math.floor(Math.random() * spread));
          const label = sys === delayq && modes.length > 1 ? `delayq-${mode}` : sys.name;
          say(`round ${r + 1}: ${row} on ${label}: ${n} jobs, first due in ${first - Date.now()} ms`);
          put(row, label, await sys.run(tag(sys, row + mode), n, (k) => dues[k], spread ? Math.min(...dues) : first, mode));
        }
      }
    }
  }
  const out = {
    config: CFG,
    payload_bytes: PAYLOAD.length,
    job_options: JOB_OPTS,
    worker_modes: modes,
    next_probe: probe,
    note,
    rows: kit.withMedians(rows),
  };
  fs.writeFileSync(A.out, JSON.stringify(out, null, 2) + '\n');
  await mon.quit();
  delayq.close();
}

main().then(
  () => process.exit(0),
  (e) => {
    say(`failed: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  },
);
