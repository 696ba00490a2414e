#!/usr/bin/env node
// bench/peers/pg_peers.js - issue 34's side-by-side benchmark: pg-boss and
// graphile-worker against delayq-server's HTTP API, all three on the same
// PostgreSQL server (each in a database of its own), from one Node.js
// process. bench/peers/pg_peers.py starts PostgreSQL's databases and
// delayq-server (--store postgres://...) and runs this with NODE_PATH
// pointing at the node_modules `npm ci` made from
// bench/peers/node/package-lock.json.
//
//   node pg_peers.js --delayq http://127.0.0.1:PORT --delayq-pid PID
//       --delayq-db URL --pgboss-db URL --graphile-db URL --pg-pid PID
//       --out FILE [--quick] [--rounds N]
//       [--worker-mode auto|plain|next|both|batch|LIST (of plain, next, batch)]
//       [--clk-tck N] [--pgboss JSON] [--graphile JSON]
//       [--systems delayq,pg-boss,graphile-worker] [--spread-ms MS]
//
// Each round runs every scenario on every system; the order rotates by one
// each round, so none always goes first. The scenarios (sizes for the full
// run; --quick shrinks them):
//   add-1   5,000 adds one at a time (sequential awaits; delayq: one
//           keep-alive socket), each due in 1 h
//   add-32  20,000 adds, 32 in flight, due in 1 h; the system's tables are
//           compacted (VACUUM FULL, untimed) and their size
//           (pg_total_relation_size, summed over its schema) read before and
//           after: the growth per job is bytes_per_job
//   burst   20,000 jobs due at one instant, run with 32 at once; jobs per
//           second from the due instant to the last completion
//   late    20,000 jobs due uniformly over 5 s; lateness of each: when the
//           handler (delayq: the worker) has it, minus its due time
// Every job carries the same 16-byte payload (pg-boss and graphile-worker:
// the JSON {"p": "xxxxxxxxxxxxxxxx"}, plus the due time in the run rows, as
// their payloads are JSON objects). The add rows' jobs are removed after
// each round, untimed (pg-boss deleteQueue, graphile-worker completeJobs,
// delayq DELETE).
//
// "The last completion" is when the completion is in the database: for
// delayq when finish answered 204; for pg-boss and graphile-worker, which
// complete jobs after the handler returned (pg-boss by batch, graphile-worker
// possibly batched too), once every handler ran this script polls the
// database every 2 ms until none of the run's jobs is left uncompleted.
'use strict';

const fs = require('fs');
const { Client } = require('pg');
const { PgBoss } = require('pg-boss');
const graphile = require('graphile-worker');
const kit = require('./peer_kit');

const { HOUR, now, pool, withTimeout, runState, summary } = kit;

function parseArgs(argv) {
  const a = { workerMode: 'auto', quick: false, rounds: 0, clkTck: 100, pgboss: '{}', graphile: '{}', systems: '', spreadMs: 0 };
  const names = {
    '--delayq': 'delayq', '--delayq-pid': 'delayqPid', '--delayq-db': 'delayqDb', '--pgboss-db': 'pgbossDb',
    '--graphile-db': 'graphileDb', '--pg-pid': 'pgPid', '--out': 'out', '--rounds': 'rounds',
    '--worker-mode': 'workerMode', '--clk-tck': 'clkTck', '--pgboss': 'pgboss', '--graphile': 'graphile',
    '--systems': 'systems', '--spread-ms': 'spreadMs',
  };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    if (k === '--quick') a.quick = true;
    else if (names[k]) {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      a[names[k]] = argv[++i];
    } else throw new Error(`unknown argument ${k}`);
  }
  for (const k of ['delayqPid', 'pgPid', 'rounds', 'clkTck', 'spreadMs']) a[k] = Number(a[k] || 0);
  for (const need of ['delayq', 'delayqDb', 'pgbossDb', 'graphileDb', 'out'])
    if (a[need] === undefined) throw new Error(`--${need.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())} is required`);
  const modeOk = ['auto', 'both'].includes(a.workerMode) || a.workerMode.split(',').every((m) => ['plain', 'next', 'batch'].includes(m));
  if (!modeOk) throw new Error(`--worker-mode ${a.workerMode}?`);
  a.pgboss = JSON.parse(a.pgboss);
  a.graphile = JSON.parse(a.graphile);
  return a;
}

const A = parseArgs(process.argv);
const CFG = A.quick
  ? { rounds: 1, seq: 300, warm: 30, par: 1000, inFlight: 32, burst: 1000, late: 1000, spreadMs: 500, workers: 32, batch: 8 }
  : { rounds: 3, seq: 5000, warm: 200, par: 20000, inFlight: 32, burst: 20000, late: 20000, spreadMs: 5000, workers: 32, batch: 8 };
if (A.rounds) CFG.rounds = A.rounds;
if (A.spreadMs) CFG.spreadMs = A.spreadMs; // the lateness row's spread (a diagnostic: another rate)
const PAYLOAD = 'x'.repeat(16);
const say = kit.logger('pg-peers');

// Every PostgreSQL backend is a child of the postmaster: their CPU, summed.
const pgCpu = () => kit.treeCpuSeconds(A.pgPid, A.clkTck);
const peerUsage = () => kit.usage({ postgres_cpu_s: pgCpu });

// --- the settings of each peer (recorded in the output) -------------------------
//
// pg-boss 12: a worker (`work`) fetches `batchSize` jobs with SKIP LOCKED,
// runs the handler on the batch, completes the batch, then waits
// `pollingIntervalSeconds` (at least 0.5 s) before the next fetch, unless
// `burstWhenBatchFull` (the fetch came back full: fetch again at once).
// `localConcurrency` such workers run in the process. 32 at once is
// localConcurrency x batchSize = 32; the split is the default below (see
// docs/benchmarks.md for the ones tried), --pgboss '{"work": {...}}'
// overrides it. The pool (`max`) covers 32 adds in flight plus the workers.
// Completed jobs stay in the table until maintenance deletes them
// (deleteAfterSeconds); pg-boss has no delete-on-complete option.
const PGBOSS = {
  boss: { schema: 'pgboss', max: 40, ...(A.pgboss.boss || {}) },
  queue: { retryLimit: 0, ...(A.pgboss.queue || {}) },
  work: { localConcurrency: 4, batchSize: 8, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5, ...(A.pgboss.work || {}) },
};
// graphile-worker 0.18: `run` with concurrency 32; each of its workers looks
// for a job as it is free, is woken at once by LISTEN/NOTIFY when a job is
// added ready to run, and polls every `pollInterval` ms otherwise (jobs due
// in the future). The local queue (a pool fetches a batch for its workers)
// and batched completions are its documented ways to more throughput
// (https://worker.graphile.org/docs/performance): a local queue of
// concurrency + 1 (its docs' starting point) and completions batched over
// 250 ms (the value its docs suggest starting with). pollInterval 100 ms (the
// default is 2 s) for the jobs due later. --graphile '{...}' overrides any
// of it (the "preset" part goes to preset.worker).
const GRAPHILE = {
  run: { schema: 'graphile_worker', concurrency: 32, pollInterval: 100, maxPoolSize: 40, ...(A.graphile.run || {}) },
  preset: { localQueue: { size: 33 }, completeJobBatchDelay: 250, ...(A.graphile.preset || {}) },
};

// --- PostgreSQL helpers -------------------------------------------------------------

async function connect(url) {
  const c = new Client({ connectionString: url });
  await c.connect();
  return c;
}

// Bytes the schema's tables take on disk: heap, indexes, TOAST, free space
// map, each partition once (a partitioned parent has no storage).
async function schemaBytes(c, schema) {
  const r = await c.query(
    `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 AS bytes
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')`,
    [schema],
  );
  return Number(r.rows[0].bytes);
}

// VACUUM FULL of each of the schema's tables: the space earlier rounds left
// free is given back, so the growth measured next is the new rows' own.
async function compact(c, schema) {
  const r = await c.query(
    `SELECT format('%I.%I', n.nspname, c.relname) AS t FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`,
    [schema],
  );
  for (const { t } of r.rows) await c.query(`VACUUM FULL ${t}`);
}

function footprint(c, schema) {
  return { key: 'bytes_per_job', prepare: () => compact(c, schema), read: () => schemaBytes(c, schema) };
}

// Polls COUNTSQL (the run's jobs not yet completed) every 2 ms until 0.
async function drained(c, countSql, args) {
  for (;;) {
    const r = await c.query(countSql, args);
    if (Number(r.rows[0].n) === 0) return now();
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

// --- pg-boss -------------------------------------------------------------------------

const pgboss = {
  name: 'pg-boss',
  async init() {
    this.boss = new PgBoss({ connectionString: A.pgbossDb, ...PGBOSS.boss });
    this.failure = null;
    this.boss.on('error', (e) => (this.failure = this.failure || e));
    await this.boss.start();
    this.db = await connect(A.pgbossDb);
  },
  async close() {
    await this.boss.stop({ graceful: false, timeout: 5000 });
    await this.db.end();
  },
  async queue(name) {
    await this.boss.createQueue(name, PGBOSS.queue);
    return name;
  },
  send(q, extra, startAfter) {
    return this.boss.send(q, { p: PAYLOAD, ...extra }, { startAfter });
  },

  async add1(tag) {
    const q = await this.queue(`peers-${tag}-add1`);
    for (let i = 0; i < CFG.warm; i++) await this.send(q, {}, new Date(Date.now() + HOUR));
    const u = peerUsage();
    const t0 = now();
    for (let i = 0; i < CFG.seq; i++) await this.send(q, {}, new Date(Date.now() + HOUR));
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.seq, seconds: +s.toFixed(4), per_s: CFG.seq / s, ...u() };
    await this.boss.deleteQueue(q);
    return res;
  },

  async add32(tag) {
    const q = await this.queue(`peers-${tag}-add32`);
    for (let i = 0; i < CFG.warm; i++) await this.send(q, {}, new Date(Date.now() + HOUR));
    const fp = footprint(this.db, PGBOSS.boss.schema);
    await fp.prepare();
    const m0 = await fp.read();
    const u = peerUsage();
    const t0 = now();
    await pool(CFG.inFlight, CFG.par, () => this.send(q, {}, new Date(Date.now() + HOUR)));
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.par, seconds: +s.toFixed(4), per_s: CFG.par / s, ...u() };
    res.bytes_per_job = ((await fp.read()) - m0) / CFG.par;
    await this.boss.deleteQueue(q);
    return res;
  },

  async run(tag, n, dueOf, firstDue) {
    const q = await this.queue(`peers-${tag}`);
    const st = runState(n);
    let handled = 0;
    let allHandled;
    const handledAll = new Promise((resolve) => (allHandled = resolve));
    // The batch is completed by pg-boss after the handler returns.
    await this.boss.work(q, PGBOSS.work, async (jobs) => {
      for (const j of jobs) st.onStart(j.data.due);
      handled += jobs.length;
      if (handled >= n) allHandled();
    });
    const u = peerUsage();
    const ud = kit.usageFrom(peerUsage, firstDue);
    await pool(CFG.inFlight, n, (k) => this.send(q, { due: dueOf(k) }, new Date(dueOf(k))));
    const addsDone = now();
    const done = (async () => {
      await handledAll;
      st.last = await drained(
        this.db,
        `SELECT count(*) AS n FROM ${PGBOSS.boss.schema}.job WHERE name = $1 AND state < 'completed'`,
        [q],
      );
    })();
    await withTimeout(done, 120000, `pg-boss ${tag}`);
    const extra = { ...u(), ...ud() };
    await this.boss.offWork(q, { wait: true });
    await this.boss.deleteQueue(q);
    if (this.failure) throw this.failure;
    return summary(st, firstDue, addsDone, extra);
  },
};

// --- graphile-worker ---------------------------------------------------------------------

const quietLogger = new graphile.Logger(() => (level, message) => {
  if (level === 'error') process.stderr.write(`graphile-worker: ${message}\n`);
});

const gw = {
  name: 'graphile-worker',
  async init() {
    this.utils = await graphile.makeWorkerUtils({
      connectionString: A.graphileDb,
      schema: GRAPHILE.run.schema,
      maxPoolSize: GRAPHILE.run.maxPoolSize,
      logger: quietLogger,
    });
    await this.utils.migrate();
    this.db = await connect(A.graphileDb);
  },
  async close() {
    await this.utils.release();
    await this.db.end();
  },
  // Task identifiers are names like peers_r0_add1_123 (one per scenario).
  task: (tag, what) => `peers_${tag}_${what}`.replace(/[^a-zA-Z0-9_]/g, '_'),
  add(task, extra, runAt) {
    return this.utils.addJob(task, { p: PAYLOAD, ...extra }, { runAt, maxAttempts: 1 });
  },

  async add1(tag) {
    const task = this.task(tag, 'add1');
    const ids = [];
    for (let i = 0; i < CFG.warm; i++) ids.push((await this.add(task, {}, new Date(Date.now() + HOUR))).id);
    const u = peerUsage();
    const t0 = now();
    for (let i = 0; i < CFG.seq; i++) ids.push((await this.add(task, {}, new Date(Date.now() + HOUR))).id);
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.seq, seconds: +s.toFixed(4), per_s: CFG.seq / s, ...u() };
    await this.utils.completeJobs(ids);
    return res;
  },

  async add32(tag) {
    const task = this.task(tag, 'add32');
    const ids = [];
    for (let i = 0; i < CFG.warm; i++) ids.push((await this.add(task, {}, new Date(Date.now() + HOUR))).id);
    const fp = footprint(this.db, GRAPHILE.run.schema);
    await fp.prepare();
    const m0 = await fp.read();
    const u = peerUsage();
    const t0 = now();
    await pool(CFG.inFlight, CFG.par, async () => ids.push((await this.add(task, {}, new Date(Date.now() + HOUR))).id));
    const s = (now() - t0) / 1000;
    const res = { ops: CFG.par, seconds: +s.toFixed(4), per_s: CFG.par / s, ...u() };
    res.bytes_per_job = ((await fp.read()) - m0) / CFG.par;
    await this.utils.completeJobs(ids);
    return res;
  },

  async run(tag, n, dueOf, firstDue) {
    const task = this.task(tag, 'run');
    const st = runState(n);
    let handled = 0;
    let allHandled;
    const handledAll = new Promise((resolve) => (allHandled = resolve));
    let failure = null;
    const runner = await graphile.run({
      connectionString: A.graphileDb,
      ...GRAPHILE.run,
      noHandleSignals: true,
      logger: quietLogger,
      taskList: {
        [task]: async (payload) => {
          st.onStart(payload.due);
          if (++handled >= n) allHandled();
        },
      },
      preset: { worker: GRAPHILE.preset },
    });
    runner.events.on('job:error', ({ error }) => (failure = failure || error));
    const u = peerUsage();
    const ud = kit.usageFrom(peerUsage, firstDue);
    await pool(CFG.inFlight, n, (k) => this.add(task, { due: dueOf(k) }, new Date(dueOf(k))));
    const addsDone = now();
    const done = (async () => {
      await handledAll;
      st.last = await drained(this.db, `SELECT count(*) AS n FROM ${GRAPHILE.run.schema}.jobs WHERE task_identifier = $1`, [task]);
    })();
    await withTimeout(done, 120000, `graphile-worker ${tag}`);
    const extra = { ...u(), ...ud() };
    await runner.stop();
    if (failure) throw failure;
    return summary(st, firstDue, addsDone, extra);
  },
};

// --- delayq: peer_kit.js, the same code http_peers.js uses ------------------------------

const delayq = new kit.delayq_http({
  url: A.delayq,
  cfg: CFG,
  payload: PAYLOAD,
  probes: { server_cpu_s: () => kit.cpuSeconds(A.delayqPid, A.clkTck), postgres_cpu_s: pgCpu },
});

async function main() {
  kit.syncClock();
  const { probe, modes, note } = await delayq.workerModes(A.workerMode);
  say(note);
  say(`delayq worker mode(s): ${modes.join(', ')}`);
  const delayqDb = await connect(A.delayqDb);
  const delayqSchema = new URL(A.delayqDb.replace(/^postgres(ql)?:/, 'http:')).searchParams.get('schema') || 'delayq';
  const all = [delayq, pgboss, gw];
  const wanted = A.systems ? A.systems.split(',') : all.map((s) => s.name);
  for (const w of wanted) if (!all.some((s) => s.name === w)) throw new Error(`--systems: no system ${w}`);
  const systems = all.filter((s) => wanted.includes(s.name));
  for (const sys of systems) if (sys.init) await sys.init();

  const rows = {};
  const put = (row, sys, fig) => ((rows[row] = rows[row] || {})[sys] = rows[row][sys] || []).push(fig);
  for (let r = 0; r < CFG.rounds; r++) {
    const order = systems.slice(r % systems.length).concat(systems.slice(0, r % systems.length));
    const tag = (sys, what) => `r${r}-${sys.name}-${what}-${process.pid}`;
    say(`round ${r + 1}/${CFG.rounds}: ${order.map((s) => s.name).join(', then ')}`);
    const rates = {};
    for (const sys of order) {
      say(`round ${r + 1}: add-1 and add-32 on ${sys.name}`);
      put('add-1', sys.name, await sys.add1(tag(sys, 'a')));
      const a32 = await sys.add32(tag(sys, 'b'), sys === delayq ? footprint(delayqDb, delayqSchema) : undefined);
      rates[sys.name] = a32.per_s;
      put('add-32', sys.name, a32);
    }
    for (const [row, n, spread] of [['burst', CFG.burst, 0], ['late', CFG.late, CFG.spreadMs]]) {
      for (const sys of order) {
        for (const mode of sys === delayq ? modes : ['-']) {
          kit.syncClock();
          const first = Math.ceil(Date.now() + kit.leadMs(rates[sys.name], n, A.quick));
          const dues = Array.from({ length: n }, () => first + Math.floor(Math.random() * spread));
          const label = sys === delayq && modes.length > 1 ? `delayq-${mode}` : sys.name;
          say(`round ${r + 1}: ${row} on ${label}: ${n} jobs, first due in ${first - Date.now()} ms`);
          put(row, label, await sys.run(tag(sys, row + mode), n, (k) => dues[k], spread ? Math.min(...dues) : first, mode));
        }
      }
    }
  }
  // Read from the files: the packages' "exports" hide their package.json.
  const versions = {};
  for (const p of ['pg-boss', 'graphile-worker', 'pg']) {
    const dir = (process.env.NODE_PATH || '').split(':').find((d) => fs.existsSync(`${d}/${p}/package.json`));
    versions[p] = dir ? JSON.parse(fs.readFileSync(`${dir}/${p}/package.json`, 'utf8')).version : '?';
  }
  const pgv = await delayqDb.query('SHOW server_version');
  const out = {
    config: CFG,
    payload_bytes: PAYLOAD.length,
    versions: { ...versions, postgres: pgv.rows[0].server_version, node: process.version },
    settings: { pgboss: PGBOSS, graphile: GRAPHILE, delayq_schema: delayqSchema },
    worker_modes: modes,
    next_probe: probe,
    note,
    rows: kit.withMedians(rows),
  };
  fs.writeFileSync(A.out, JSON.stringify(out, null, 2) + '\n');
  await delayqDb.end();
  for (const sys of systems) await sys.close();
}

main().then(
  () => process.exit(0),
  (e) => {
    say(`failed: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  },
);
