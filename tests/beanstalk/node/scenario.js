// tests/beanstalk/node/scenario.js - the npm client node-beanstalk (1.6.7,
// unmodified; package-lock.json pins it) against a beanstalkd-speaking server.
//
//   NODE_PATH=DIR/node_modules node tests/beanstalk/node/scenario.js HOST PORT TUBE_PREFIX
//
// The same scenario as php/scenario.php (tests/beanstalk/README.md), plus
// reserve-job, which pheanstalk 4.0 does not have. Every step goes through
// node-beanstalk's own API, on tubes named TUBE_PREFIX.* that no one else uses.
// Exits 0 when every check held; otherwise prints the step, what was
// expected and what came back, and exits 1. Waits only through the protocol
// (reserve-with-timeout with generous timeouts), never with a timer, and
// asserts no timing threshold.
'use strict';

const assert = require('assert');
const { Client } = require('node-beanstalk');

// How long a reserve may wait for an event the server owes us (a delayed job
// coming due, a pause ending): far longer than the 1 s each takes.
const WAIT_S = 30;

if (process.argv.length !== 5) {
  console.error('usage: node scenario.js HOST PORT TUBE_PREFIX');
  process.exit(2);
}
const [host, portText, prefix] = process.argv.slice(2);

let step = 'connect';

function fail(what) {
  console.error(`FAIL node-beanstalk scenario, step '${step}': ${what}`);
  process.exit(1);
}

const show = (v) => (Buffer.isBuffer(v) ? `<Buffer ${JSON.stringify(v.toString('latin1'))}>` : JSON.stringify(v));

function eq(want, got, what) {
  try {
    assert.deepStrictEqual(got, want);
  } catch {
    fail(`${what}: expected ${show(want)}, got ${show(got)}`);
  }
}

function ok(cond, what) {
  if (!cond) fail(what);
}

// Awaits `p` and expects the server's reply `reply` as an error (the client
// throws a BeanstalkError whose code is the reply).
async function rejects(reply, p, what) {
  try {
    await p;
  } catch (e) {
    if (e.code !== reply && !String(e.message).includes(reply)) {
      fail(`${what}: expected ${reply}, got ${e.name} ${e.code}: ${e.message}`);
    }
    return;
  }
  fail(`${what}: expected ${reply}, the call succeeded`);
}

const body = (job) => (job === null ? null : Buffer.from(job.payload).toString('latin1'));

function job(j, id, data, what) {
  if (j === null) fail(`${what}: expected job ${id}, got ${j === null ? 'TIMED_OUT / NOT_FOUND' : show(j)}`);
  eq(id, j.id, `${what}: job id`);
  eq(data, body(j), `${what}: job ${id}'s body`);
  return j;
}

async function stats(c, id, want, what) {
  const s = await c.statsJob(id);
  if (s === null) fail(`${what}: stats-job ${id} answered NOT_FOUND`);
  for (const [k, v] of Object.entries(want)) {
    ok(k in s, `${what}: no '${k}' in stats-job ${id}: ${show(s)}`);
    eq(String(v), String(s[k]), `${what}: stats-job ${id} '${k}'`);
  }
  return s;
}

function field(s, k) {
  if (s === null || !(k in s)) fail(`no '${k}' in the reply: ${show(s)}`);
  return s[k];
}

async function main() {
  const c = new Client({ host, port: Number(portText) });
  await c.connect();
  const a = `${prefix}.a`;
  const b = `${prefix}.b`;
  const p = `${prefix}.p`;
  // Bytes beyond ASCII, a CRLF and a NUL inside the body: latin1 maps each byte to one char.
  const binary = 'body\r\nwith CRLF and \u0000\u00ff bytes';
  const binaryBuf = Buffer.from(binary, 'latin1');

  step = 'use and watch';
  eq(a, await c.use(a), 'use');
  eq(a, await c.listTubeUsed(), 'list-tube-used');
  eq(2, await c.watch(a), 'watch a: WATCHING 2');
  eq(true, await c.ignore('default'), 'ignore default');
  eq([a], await c.listTubesWatched(), 'list-tubes-watched after watch a, ignore default');
  eq(false, await c.ignore(a), 'ignore of the only watched tube: NOT_IGNORED');
  eq([a], await c.listTubesWatched(), 'list-tubes-watched after NOT_IGNORED');

  step = 'reserve-with-timeout on an empty tube';
  eq(null, await c.reserveWithTimeout(0), 'reserve-with-timeout 0');
  eq(null, await c.reserveWithTimeout(1), 'reserve-with-timeout 1');

  step = 'priorities: lowest first, FIFO among equals';
  const puts = [[10, 'p10'], [1, 'p1-first'], [5, 'p5'], [1, 'p1-second'], [4294967295, 'pmax'],
    [0, 'p0'], [1, 'p1-third']];
  const ids = [];
  for (const [pri, data] of puts) {
    const r = await c.put(data, 60, pri, 0);
    eq('ready', r.state, `put ${data}: INSERTED`);
    ids.push(r.id);
  }
  eq(ids.length, new Set(ids).size, 'distinct job ids');
  const order = puts.map(([pri, data], k) => [pri, k, data])
    .sort((x, y) => x[0] - y[0] || x[1] - y[1]).map((x) => x[2]);
  let s = await c.statsTube(a);
  eq(a, field(s, 'name'), 'stats-tube name');
  eq(7, field(s, 'current-jobs-ready'), 'stats-tube current-jobs-ready');
  eq(6, field(s, 'current-jobs-urgent'), 'stats-tube current-jobs-urgent (pri < 1024)');
  const got = [];
  const first = await c.reserve();
  got.push(body(first));
  eq(true, await c.delete(first.id), 'delete');
  for (let i = 1; i < order.length; i++) {
    const j = await c.reserveWithTimeout(WAIT_S);
    ok(j !== null, `reserve ${i} of ${order.length} timed out`);
    got.push(body(j));
    eq(true, await c.delete(j.id), 'delete');
  }
  eq(order, got, 'reservation order');

  step = 'put with priority, delay and ttr; stats-job';
  const put = await c.put(binaryBuf, 45, 7, 3600);
  eq('delayed', put.state, 'put with a delay');
  const id = put.id;
  await stats(c, id, { id, tube: a, state: 'delayed', pri: 7, delay: 3600, ttr: 45, reserves: 0,
    releases: 0, buries: 0, kicks: 0 }, 'a delayed put');
  job(await c.peek(id), id, binary, 'peek');
  job(await c.peekDelayed(), id, binary, 'peek-delayed');
  eq(null, await c.peekReady(), 'peek-ready with only a delayed job');
  eq(null, await c.peekBuried(), 'peek-buried with nothing buried');
  eq(null, await c.reserveWithTimeout(0), 'reserve-with-timeout 0 with only a delayed job');
  eq(1, field(await c.statsTube(a), 'current-jobs-delayed'), 'stats-tube current-jobs-delayed');

  step = 'kick-job of a delayed job';
  eq(true, await c.kickJob(id), 'kick-job');
  await stats(c, id, { state: 'ready', kicks: 1 }, 'after kick-job');
  job(await c.peekReady(), id, binary, 'peek-ready');
  let j = job(await c.reserveWithTimeout(0), id, binary, 'reserve after kick-job');
  const st = await stats(c, id, { state: 'reserved', reserves: 1, ttr: 45 }, 'reserved');
  ok(st['time-left'] >= 0 && st['time-left'] <= 45, `time-left ${st['time-left']} within 0..45`);

  step = 'touch';
  eq(true, await c.touch(id), 'touch');
  await stats(c, id, { state: 'reserved' }, 'after touch');

  step = 'release with a new priority and a delay';
  eq('delayed', await c.release(id, 3, 1), 'release with delay 1: RELEASED');
  await stats(c, id, { pri: 3, delay: 1, releases: 1 }, 'after release');
  // Due 1 s after the release: wait for it through the protocol.
  j = job(await c.reserveWithTimeout(WAIT_S), id, binary, 'the released job, once its delay is over');
  await stats(c, id, { state: 'reserved', reserves: 2, pri: 3 }, 'reserved again');

  step = 'bury, peek-buried, kick';
  eq(true, await c.bury(id, 20), 'bury');
  await stats(c, id, { state: 'buried', buries: 1, pri: 20 }, 'after bury');
  job(await c.peekBuried(), id, binary, 'peek-buried');
  // kick kicks buried jobs first: a delayed job in the same tube stays put.
  const delayed = (await c.put('delayed', 60, 100, 3600)).id;
  s = await c.statsTube(a);
  eq(1, field(s, 'current-jobs-buried'), 'stats-tube current-jobs-buried');
  eq(1, field(s, 'current-jobs-delayed'), 'stats-tube current-jobs-delayed');
  eq(1, await c.kick(10), 'kick 10 with one buried and one delayed job');
  await stats(c, id, { state: 'ready', kicks: 2 }, 'the buried job after kick');
  await stats(c, delayed, { state: 'delayed', kicks: 0 }, 'the delayed job after kick');
  // With nothing buried, kick moves delayed jobs.
  eq(1, await c.kick(10), 'kick 10 with only a delayed job');
  await stats(c, delayed, { state: 'ready', kicks: 1 }, 'the delayed job after the second kick');
  eq(0, await c.kick(10), 'kick with nothing buried or delayed');

  step = 'kick-job of a buried job';
  j = job(await c.reserveWithTimeout(0), id, binary, 'reserve: pri 20 before pri 100');
  eq(true, await c.bury(id, 20), 'bury');
  eq(true, await c.kickJob(id), 'kick-job');
  await stats(c, id, { state: 'ready', kicks: 3 }, 'after kick-job');
  eq(false, await c.kickJob(id), 'kick-job of a ready job: NOT_FOUND');

  step = 'reserve-job';
  j = job(await c.reserveJob(delayed), delayed, 'delayed', 'reserve-job of the pri 100 job');
  await stats(c, delayed, { state: 'reserved', reserves: 1 }, 'after reserve-job');
  eq('ready', await c.release(delayed, 100, 0), 'release: RELEASED');

  step = 'delete, then NOT_FOUND';
  eq(true, await c.delete(id), 'delete');
  eq(true, await c.delete(delayed), 'delete');
  eq(null, await c.peek(id), 'peek of a deleted job: NOT_FOUND');
  eq(false, await c.delete(id), 'delete of a deleted job: NOT_FOUND');
  eq(null, await c.statsJob(id), 'stats-job of a deleted job: NOT_FOUND');
  eq(null, await c.reserveJob(id), 'reserve-job of a deleted job: NOT_FOUND');

  step = 'ttr 0 is taken as 1';
  const z = (await c.put('ttr0', 0, 0, 0)).id;
  await stats(c, z, { ttr: 1 }, 'put with ttr 0');
  eq(true, await c.delete(z), 'delete');

  step = 'several watched tubes';
  eq(b, await c.use(b), 'use b');
  const jb = (await c.put('in b', 60, 0, 0)).id;
  eq(null, await c.reserveWithTimeout(0), 'b is not watched yet');
  eq(2, await c.watch(b), 'watch b');
  eq([a, b], (await c.listTubesWatched()).sort(), 'list-tubes-watched');
  job(await c.reserveWithTimeout(0), jb, 'in b', 'reserve from b');
  eq(true, await c.delete(jb), 'delete');
  eq(true, await c.ignore(b), 'ignore b');
  eq([a], await c.listTubesWatched(), 'list-tubes-watched after ignore b');

  step = 'pause-tube';
  await c.use(p);
  await c.watch(p);
  let jp = (await c.put('paused', 60, 0, 0)).id;
  eq(true, await c.pauseTube(p, 3600), 'pause-tube 3600');
  s = await c.statsTube(p);
  eq(3600, field(s, 'pause'), 'stats-tube pause');
  eq(1, field(s, 'current-jobs-ready'), 'stats-tube current-jobs-ready of the paused tube');
  eq(null, await c.reserveWithTimeout(0), 'reserve-with-timeout 0 from a paused tube');
  eq(true, await c.pauseTube(p, 0), 'pause-tube 0 (resume)');
  job(await c.reserveWithTimeout(0), jp, 'paused', 'reserve after pause-tube 0');
  await c.delete(jp);
  // A pause of 1 s ends by itself: a waiting reserve gets the job then.
  jp = (await c.put('paused 1 s', 60, 0, 0)).id;
  eq(true, await c.pauseTube(p, 1), 'pause-tube 1');
  job(await c.reserveWithTimeout(WAIT_S), jp, 'paused 1 s', 'reserve across a 1 s pause');
  await c.delete(jp);
  eq(false, await c.pauseTube(`${prefix}.nosuchtube`, 1), 'pause-tube of a tube that does not exist: NOT_FOUND');

  step = 'list-tubes';
  const tubes = await c.listTubes();
  for (const t of [a, p, 'default']) ok(tubes.includes(t), `list-tubes has ${t}: ${show(tubes)}`);

  step = 'stats';
  s = await c.stats();
  for (const k of ['current-jobs-ready', 'current-jobs-reserved', 'current-jobs-delayed',
    'current-jobs-buried', 'cmd-put', 'cmd-reserve', 'cmd-reserve-with-timeout', 'cmd-delete',
    'cmd-release', 'cmd-bury', 'cmd-kick', 'cmd-touch', 'cmd-stats', 'cmd-stats-job',
    'cmd-stats-tube', 'cmd-pause-tube', 'total-jobs', 'max-job-size', 'current-connections',
    'current-tubes', 'version', 'uptime', 'pid']) {
    field(s, k);
  }
  ok(s['cmd-put'] >= 12, `stats cmd-put counts our 12 puts: ${s['cmd-put']}`);
  ok(s['total-jobs'] >= 12, `stats total-jobs counts our 12 jobs: ${s['total-jobs']}`);
  ok(s['current-connections'] >= 1, 'stats current-connections counts us');
  eq(false, field(s, 'draining'), 'stats draining');

  step = 'our tubes are empty at the end';
  for (const t of [a, p]) {
    s = await c.statsTube(t);
    for (const k of ['ready', 'reserved', 'delayed', 'buried']) {
      eq(0, field(s, `current-jobs-${k}`), `stats-tube ${t} current-jobs-${k}`);
    }
  }

  step = 'quit';
  await c.disconnect();
}

main().then(
  () => {
    console.log(`node-beanstalk scenario: every check passed (${host}:${portText}, tubes ${prefix}.*)`);
    process.exit(0);
  },
  (e) => fail(`unexpected ${e && e.name}: ${e && e.stack ? e.stack : e}`),
);
