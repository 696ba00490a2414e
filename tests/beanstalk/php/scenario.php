<?php
// tests/beanstalk/php/scenario.php - PHP's pheanstalk 4.0 (Debian's
// php-pda-pheanstalk, unmodified) against a beanstalkd-speaking server.
//
//   php tests/beanstalk/php/scenario.php HOST PORT TUBE_PREFIX
//
// Runs the scenario of tests/beanstalk/README.md: every step through
// pheanstalk's own API, on tubes named TUBE_PREFIX.* that no one else uses.
// Exits 0 when every check held; otherwise prints the step, what was expected
// and what came back, and exits 1. Waits only through the protocol
// (reserve-with-timeout with generous timeouts), never with a sleep, and asserts
// no timing threshold.

declare(strict_types=1);

require_once '/usr/share/php/Pheanstalk/autoload.php';

use Pheanstalk\Exception\JobNotFoundException;
use Pheanstalk\Exception\ServerException;
use Pheanstalk\Job;
use Pheanstalk\JobId;
use Pheanstalk\Pheanstalk;

// How long a reserve may wait for an event the server owes us (a delayed job
// coming due, a pause ending): far longer than the 1 s each takes, so a slow
// machine (a sanitizer build, a loaded CI) never fails it.
const WAIT_S = 30;

if ($argc !== 4) {
    fwrite(STDERR, "usage: php scenario.php HOST PORT TUBE_PREFIX\n");
    exit(2);
}
[$_, $host, $port, $prefix] = $argv;

$step = 'connect';

function fail(string $what): void
{
    global $step;
    fwrite(STDERR, "FAIL pheanstalk scenario, step '$step': $what\n");
    exit(1);
}

function show($v): string
{
    return var_export($v, true);
}

function expect_eq($want, $got, string $what): void
{
    if ($want !== $got) {
        fail("$what: expected " . show($want) . ', got ' . show($got));
    }
}

function expect_true(bool $cond, string $what): void
{
    if (!$cond) {
        fail($what);
    }
}

// Calls $f and expects pheanstalk to throw $class for the reply $reply.
function expect_throws(string $class, string $reply, callable $f, string $what): void
{
    try {
        $f();
    } catch (Throwable $e) {
        if (!($e instanceof $class) || strpos($e->getMessage(), $reply) === false) {
            fail("$what: expected $reply ($class), got " . get_class($e) . ': ' . $e->getMessage());
        }
        return;
    }
    fail("$what: expected $reply, the call succeeded");
}

// A stats-job / stats-tube / stats field, as the client parsed it.
function field($response, string $name)
{
    $a = $response->getArrayCopy();
    if (!array_key_exists($name, $a)) {
        fail("no '$name' in the reply: " . show($a));
    }
    return $a[$name];
}

function expect_job(?Job $job, int $id, string $data, string $what): Job
{
    if ($job === null) {
        fail("$what: expected job $id, got TIMED_OUT");
    }
    expect_eq($id, $job->getId(), "$what: job id");
    expect_eq($data, $job->getData(), "$what: job $id's body");
    return $job;
}

function expect_stats(Pheanstalk $c, int $id, array $want, string $what): void
{
    $s = $c->statsJob(new JobId($id));
    foreach ($want as $k => $v) {
        expect_eq((string)$v, (string)field($s, $k), "$what: stats-job $id '$k'");
    }
}

try {
    $c = Pheanstalk::create($host, (int)$port, 10);
    $a = "$prefix.a";
    $b = "$prefix.b";
    $p = "$prefix.p";

    $step = 'use and watch';
    $c->useTube($a);
    expect_eq($a, $c->listTubeUsed(true), 'list-tube-used');
    $c->watch($a);
    $c->ignore('default');
    expect_eq([$a], $c->listTubesWatched(true), 'list-tubes-watched after watch a, ignore default');
    expect_throws(ServerException::class, 'NOT_IGNORED', fn () => $c->ignore($a),
        'ignore of the only watched tube');
    expect_eq([$a], $c->listTubesWatched(true), 'list-tubes-watched after NOT_IGNORED');

    $step = 'reserve-with-timeout on an empty tube';
    expect_eq(null, $c->reserveWithTimeout(0), 'reserve-with-timeout 0');
    expect_eq(null, $c->reserveWithTimeout(1), 'reserve-with-timeout 1');

    $step = 'priorities: lowest first, FIFO among equals';
    $order = [];
    $ids = [];
    foreach ([[10, 'p10'], [1, 'p1-first'], [5, 'p5'], [1, 'p1-second'], [4294967295, 'pmax'],
              [0, 'p0'], [1, 'p1-third']] as [$pri, $body]) {
        $ids[$body] = $c->put($body, $pri, 0, 60)->getId();
        $order[] = [$pri, count($order), $body];
    }
    expect_eq(count($ids), count(array_unique($ids)), 'distinct job ids');
    usort($order, fn ($x, $y) => [$x[0], $x[1]] <=> [$y[0], $y[1]]);
    $s = $c->statsTube($a);
    expect_eq($a, field($s, 'name'), 'stats-tube name');
    expect_eq('7', (string)field($s, 'current-jobs-ready'), 'stats-tube current-jobs-ready');
    expect_eq('6', (string)field($s, 'current-jobs-urgent'), 'stats-tube current-jobs-urgent (pri < 1024)');
    $first = $c->reserve();
    $got = [$first->getData()];
    $c->delete($first);
    for ($i = 1; $i < count($order); $i++) {
        $j = $c->reserveWithTimeout(WAIT_S);
        expect_true($j !== null, "reserve $i of " . count($order) . ' timed out');
        $got[] = $j->getData();
        $c->delete($j);
    }
    expect_eq(array_column($order, 2), $got, 'reservation order');

    $step = 'put with priority, delay and ttr; stats-job';
    $id = $c->put("body\r\nwith CRLF and \x00\xff bytes", 7, 3600, 45)->getId();
    expect_stats($c, $id, ['id' => $id, 'tube' => $a, 'state' => 'delayed', 'pri' => 7,
        'delay' => 3600, 'ttr' => 45, 'reserves' => 0, 'releases' => 0, 'buries' => 0,
        'kicks' => 0], 'a delayed put');
    expect_job($c->peek(new JobId($id)), $id, "body\r\nwith CRLF and \x00\xff bytes", 'peek');
    expect_job($c->peekDelayed(), $id, "body\r\nwith CRLF and \x00\xff bytes", 'peek-delayed');
    expect_eq(null, $c->peekReady(), 'peek-ready with only a delayed job');
    expect_eq(null, $c->peekBuried(), 'peek-buried with nothing buried');
    expect_eq(null, $c->reserveWithTimeout(0), 'reserve-with-timeout 0 with only a delayed job');
    expect_eq('1', (string)field($c->statsTube($a), 'current-jobs-delayed'), 'stats-tube current-jobs-delayed');

    $step = 'kick-job of a delayed job';
    $c->kickJob(new JobId($id));
    expect_stats($c, $id, ['state' => 'ready', 'kicks' => 1], 'after kick-job');
    expect_job($c->peekReady(), $id, "body\r\nwith CRLF and \x00\xff bytes", 'peek-ready');
    $j = expect_job($c->reserveWithTimeout(0), $id, "body\r\nwith CRLF and \x00\xff bytes",
        'reserve after kick-job');
    expect_stats($c, $id, ['state' => 'reserved', 'reserves' => 1, 'ttr' => 45], 'reserved');
    $left = (int)field($c->statsJob($j), 'time-left');
    expect_true($left >= 0 && $left <= 45, "time-left $left within 0..45");

    $step = 'touch';
    $c->touch($j);
    expect_stats($c, $id, ['state' => 'reserved'], 'after touch');

    $step = 'release with a new priority and a delay';
    $c->release($j, 3, 1);
    expect_stats($c, $id, ['pri' => 3, 'delay' => 1, 'releases' => 1], 'after release');
    // Due 1 s after the release: wait for it through the protocol.
    $j = expect_job($c->reserveWithTimeout(WAIT_S), $id, "body\r\nwith CRLF and \x00\xff bytes",
        'the released job, once its delay is over');
    expect_stats($c, $id, ['state' => 'reserved', 'reserves' => 2, 'pri' => 3], 'reserved again');

    $step = 'bury, peek-buried, kick';
    $c->bury($j, 20);
    expect_stats($c, $id, ['state' => 'buried', 'buries' => 1, 'pri' => 20], 'after bury');
    expect_job($c->peekBuried(), $id, "body\r\nwith CRLF and \x00\xff bytes", 'peek-buried');
    // kick kicks buried jobs first: a delayed job in the same tube stays put.
    $delayed = $c->put('delayed', 100, 3600, 60)->getId();
    $s = $c->statsTube($a);
    expect_eq('1', (string)field($s, 'current-jobs-buried'), 'stats-tube current-jobs-buried');
    expect_eq('1', (string)field($s, 'current-jobs-delayed'), 'stats-tube current-jobs-delayed');
    expect_eq(1, $c->kick(10), 'kick 10 with one buried and one delayed job');
    expect_stats($c, $id, ['state' => 'ready', 'kicks' => 2], 'the buried job after kick');
    expect_stats($c, $delayed, ['state' => 'delayed', 'kicks' => 0], 'the delayed job after kick');
    // With nothing buried, kick moves delayed jobs.
    expect_eq(1, $c->kick(10), 'kick 10 with only a delayed job');
    expect_stats($c, $delayed, ['state' => 'ready', 'kicks' => 1], 'the delayed job after the second kick');
    expect_eq(0, $c->kick(10), 'kick with nothing buried or delayed');

    $step = 'kick-job of a buried job';
    $j = expect_job($c->reserveWithTimeout(0), $id, "body\r\nwith CRLF and \x00\xff bytes",
        'reserve: pri 20 before pri 100');
    $c->bury($j, 20);
    $c->kickJob($j);
    expect_stats($c, $id, ['state' => 'ready', 'kicks' => 3], 'after kick-job');
    expect_throws(JobNotFoundException::class, 'NOT_FOUND', fn () => $c->kickJob($j),
        'kick-job of a ready job');

    $step = 'delete, then NOT_FOUND';
    $c->delete($j);
    $c->delete(new JobId($delayed));
    expect_throws(ServerException::class, 'NOT_FOUND', fn () => $c->peek(new JobId($id)),
        'peek of a deleted job');
    expect_throws(JobNotFoundException::class, 'NOT_FOUND', fn () => $c->delete(new JobId($id)),
        'delete of a deleted job');
    expect_throws(ServerException::class, 'NOT_FOUND', fn () => $c->statsJob(new JobId($id)),
        'stats-job of a deleted job');

    $step = 'ttr 0 is taken as 1';
    $z = $c->put('ttr0', 0, 0, 0);
    expect_stats($c, $z->getId(), ['ttr' => 1], 'put with ttr 0');
    $c->delete($z);

    $step = 'several watched tubes';
    $c->useTube($b);
    $jb = $c->put('in b', 0, 0, 60)->getId();
    expect_eq(null, $c->reserveWithTimeout(0), 'b is not watched yet');
    $c->watch($b);
    expect_eq([$a, $b], (function ($l) { sort($l); return $l; })($c->listTubesWatched(true)),
        'list-tubes-watched');
    expect_job($c->reserveWithTimeout(0), $jb, 'in b', 'reserve from b');
    $c->delete(new JobId($jb));
    $c->ignore($b);
    expect_eq([$a], $c->listTubesWatched(true), 'list-tubes-watched after ignore b');

    $step = 'pause-tube';
    $c->useTube($p);
    $c->watch($p);
    $jp = $c->put('paused', 0, 0, 60)->getId();
    $c->pauseTube($p, 3600);
    $s = $c->statsTube($p);
    expect_eq('3600', (string)field($s, 'pause'), 'stats-tube pause');
    expect_eq('1', (string)field($s, 'current-jobs-ready'), 'stats-tube current-jobs-ready of the paused tube');
    expect_eq(null, $c->reserveWithTimeout(0), 'reserve-with-timeout 0 from a paused tube');
    $c->resumeTube($p);  // pause-tube P 0
    expect_job($c->reserveWithTimeout(0), $jp, 'paused', 'reserve after pause-tube 0');
    $c->delete(new JobId($jp));
    // A pause of 1 s ends by itself: a waiting reserve gets the job then.
    $jp = $c->put('paused 1 s', 0, 0, 60)->getId();
    $c->pauseTube($p, 1);
    expect_job($c->reserveWithTimeout(WAIT_S), $jp, 'paused 1 s', 'reserve across a 1 s pause');
    $c->delete(new JobId($jp));

    $step = 'list-tubes';
    $tubes = $c->listTubes();
    foreach ([$a, $p, 'default'] as $t) {
        expect_true(in_array($t, $tubes, true), "list-tubes has $t: " . show($tubes));
    }

    $step = 'stats';
    $s = $c->stats();
    foreach (['current-jobs-ready', 'current-jobs-reserved', 'current-jobs-delayed',
              'current-jobs-buried', 'cmd-put', 'cmd-reserve', 'cmd-reserve-with-timeout',
              'cmd-delete', 'cmd-release', 'cmd-bury', 'cmd-kick', 'cmd-touch', 'cmd-stats',
              'cmd-stats-job', 'cmd-stats-tube', 'cmd-pause-tube', 'total-jobs', 'max-job-size',
              'current-connections', 'current-tubes', 'version', 'uptime', 'pid'] as $k) {
        field($s, $k);
    }
    expect_true((int)field($s, 'cmd-put') >= 12, 'stats cmd-put counts our 12 puts: ' . field($s, 'cmd-put'));
    expect_true((int)field($s, 'total-jobs') >= 12, 'stats total-jobs counts our 12 jobs');
    expect_true((int)field($s, 'current-connections') >= 1, 'stats current-connections counts us');
    expect_true(in_array((string)field($s, 'draining'), ['false', ''], true),
        'stats draining is false: ' . show(field($s, 'draining')));

    $step = 'our tubes are empty at the end';
    foreach ([$a, $p] as $t) {
        $s = $c->statsTube($t);
        foreach (['ready', 'reserved', 'delayed', 'buried'] as $k) {
            expect_eq('0', (string)field($s, "current-jobs-$k"), "stats-tube $t current-jobs-$k");
        }
    }
} catch (Throwable $e) {
    fail('unexpected ' . get_class($e) . ': ' . $e->getMessage());
}

echo "pheanstalk scenario: every check passed ($host:$port, tubes $prefix.*)\n";
exit(0);
