// tests/openapi/check_openapi.mjs - server/openapi/openapi.json against a
// real delayq-server (docs/server.md, "OpenAPI"; label `openapi`):
//
//   1. the document validates as OpenAPI 3.1 (@seriousme/openapi-schema-validator,
//      the official 3.1 JSON schema, and every $ref resolves);
//   2. every route `delayq-server --list-routes` prints is in it, and it
//      has no other;
//   3. a server started here serves the same document at GET /v1/openapi.json
//      (with the token; 401 without);
//   4. every example request of the document is sent, in the document's
//      order, and answers its `x-status`, with a body that validates
//      against the document's schema for that status and media type (Ajv,
//      JSON Schema 2020-12, the dialect of OpenAPI 3.1).
//
// node check_openapi.mjs --server BIN --doc FILE --node-modules DIR
// Exits 0 when all holds, 1 with every failure listed otherwise.
import { spawn, execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { isDeepStrictEqual } from "node:util";

const args = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
for (const need of ["server", "doc", "node-modules"])
  if (!args[need]) {
    console.error("usage: node check_openapi.mjs --server BIN --doc FILE --node-modules DIR");
    process.exit(2);
  }

const nodeModules = path.resolve(args["node-modules"]);
const require = createRequire(path.join(nodeModules, "noop.js"));
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;
const { Validator } = await import(
  pathToFileURL(path.join(nodeModules, "@seriousme/openapi-schema-validator/index.js")).href
);

const failures = [];
const fail = (what) => failures.push(what);
const METHODS = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];
const TOKEN = "openapi-check-token-0123";
const LEASE = "LEASE-FROM-RESERVE";
// A path item's operations, in the document's order (the examples' story).
const methodsOf = (item) => Object.keys(item).filter((k) => METHODS.includes(k));
const docText = readFileSync(args.doc, "utf8");
const doc = JSON.parse(docText);

// ---------------------------------------------------------------- 1. valid 3.1
const validator = new Validator();
const verdict = await validator.validate(structuredClone(doc));
if (validator.version !== "3.1") fail(`the document is OpenAPI ${validator.version}, not 3.1`);
if (!verdict.valid) fail(`the document is not valid OpenAPI 3.1: ${JSON.stringify(verdict.errors, null, 1)}`);

// ---------------------------------------------------------------- 2. the routes
const listed = execFileSync(args.server, ["--list-routes"], { encoding: "utf8" })
  .split("\n")
  .filter((l) => l.trim() !== "")
  .map((l) => l.trim());
const documented = [];
for (const [p, item] of Object.entries(doc.paths))
  for (const m of methodsOf(item)) documented.push(`${m.toUpperCase()} ${p}`);
for (const r of listed) if (!documented.includes(r)) fail(`route ${r} (--list-routes) is not in the document`);
for (const r of documented) if (!listed.includes(r)) fail(`${r} is in the document but not in --list-routes`);

// ---------------------------------------------------------------- the schemas
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
// OpenAPI's integer formats: ranges, as Ajv knows none of them.
ajv.addFormat("int64", { type: "number", validate: (n) => Number.isInteger(n) });
ajv.addFormat("int32", { type: "number", validate: (n) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
ajv.addSchema(doc, "openapi.json");
const pointer = (parts) => "#/" + parts.map((s) => String(s).replaceAll("~", "~0").replaceAll("/", "~1")).join("/");
const compiled = new Map();
function validatorAt(parts) {
  const ref = "openapi.json" + pointer(parts);
  if (!compiled.has(ref)) compiled.set(ref, ajv.compile({ $ref: ref }));
  return compiled.get(ref);
}
// A Response or Parameter object, through its $ref; with the JSON pointer
// parts of where it is (schemas are compiled from there).
function deref(obj, parts) {
  while (obj && obj.$ref) {
    parts = obj.$ref.replace(/^#\//, "").split("/").map((s) => s.replaceAll("~1", "/").replaceAll("~0", "~"));
    obj = parts.reduce((o, k) => o[k], doc);
  }
  return [obj, parts];
}

// ---------------------------------------------------------------- 3. the server
const server = spawn(
  args.server,
  ["--listen", "127.0.0.1:0", "--store", "memory:", "--token", TOKEN, "--tick", "10", "--retry-max", "1"],
  { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, DELAYQ_TOKEN: "", DELAYQ_STORE: "" } },
);
let serverErr = "";
server.stderr.on("data", (d) => (serverErr += d));
const exited = new Promise((resolve) => server.on("exit", (code, sig) => resolve({ code, sig })));
const port = await new Promise((resolve, reject) => {
  let out = "";
  server.stdout.on("data", (d) => {
    out += d;
    const m = out.match(/listening on [^\n]*:(\d+)\n/);
    if (m) resolve(Number(m[1]));
  });
  exited.then(({ code, sig }) => reject(new Error(`delayq-server exited (${code ?? sig}) before it listened:\n${serverErr}`)));
});
const base = `http://127.0.0.1:${port}`;

async function send(method, target, body, token = TOKEN) {
  const headers = {};
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(base + target, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, type: res.headers.get("content-type") ?? "", text: await res.text() };
}

const served = await send("GET", "/v1/openapi.json");
if (served.status !== 200) fail(`GET /v1/openapi.json answered ${served.status}`);
else if (!isDeepStrictEqual(JSON.parse(served.text), doc))
  fail("GET /v1/openapi.json is not server/openapi/openapi.json (rebuild delayq-server)");
const anonymous = await send("GET", "/v1/openapi.json", undefined, "");
if (anonymous.status !== 401) fail(`GET /v1/openapi.json without the token answered ${anonymous.status}, not 401`);

// ---------------------------------------------------------------- 4. the examples
const leases = new Map(); // task id -> the lease a reserve gave
function noteLeases(answer) {
  for (const t of JSON.parse(answer.text).tasks ?? []) leases.set(t.id, t.lease);
}
async function leaseFor(id) {
  // Reserve (long polls, answered once a task is ready) until a lease for
  // the task comes, or ten empty answers in a row.
  for (let empty = 0; !leases.has(id) && empty < 10; ) {
    const r = await send("POST", "/v1/reserve", { max: 100, wait_ms: 2000 });
    if (r.status !== 200) throw new Error(`a reserve for ${id}'s lease answered ${r.status}: ${r.text}`);
    const got = JSON.parse(r.text).tasks.length;
    noteLeases(r);
    empty = got === 0 ? empty + 1 : 0;
  }
  if (!leases.has(id)) throw new Error(`no reserve gave a lease for task ${id}`);
  return leases.get(id);
}
async function withLeases(value, id) {
  if (value === LEASE) return leaseFor(id);
  if (Array.isArray(value)) return Promise.all(value.map((v) => withLeases(v, id)));
  if (value && typeof value === "object") {
    // An item of POST /v1/tasks:finish names its own task.
    if (value.lease === LEASE && typeof value.id === "string") id = value.id;
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = await withLeases(v, id);
    return out;
  }
  return value;
}

let sent = 0;
for (const [p, item] of Object.entries(doc.paths)) {
  for (const m of methodsOf(item)) {
    const op = item[m];
    const where = `${m.toUpperCase()} ${p}`;
    const params = (op.parameters ?? []).map((x, i) => deref(x, ["paths", p, m, "parameters", i])[0]);
    const bodyExamples = op.requestBody?.content?.["application/json"]?.examples ?? {};
    const names = new Set([
      ...Object.keys(op["x-examples"] ?? {}),
      ...Object.keys(bodyExamples),
      ...params.flatMap((x) => Object.keys(x.examples ?? {})),
    ]);
    if (names.size === 0) fail(`${where} has no example request`);
    for (const name of names) {
      const label = `${where} example "${name}"`;
      const statuses = new Set();
      const noteStatus = (e) => e?.["x-status"] !== undefined && statuses.add(e["x-status"]);
      noteStatus(op["x-examples"]?.[name]);
      noteStatus(bodyExamples[name]);
      let target = p;
      const query = [];
      let id = "";
      for (const x of params) {
        noteStatus(x.examples?.[name]);
        const value = x.examples?.[name]?.value ?? x.example;
        if (x.in === "path") {
          if (value === undefined) {
            fail(`${label}: no value for path parameter ${x.name}`);
            continue;
          }
          if (x.name === "id") id = String(value);
          target = target.replace(`{${x.name}}`, encodeURIComponent(String(value)));
        } else if (x.in === "query" && value !== undefined) {
          query.push(`${encodeURIComponent(x.name)}=${encodeURIComponent(String(value))}`);
        }
      }
      if (query.length) target += "?" + query.join("&");
      if (statuses.size !== 1) {
        fail(`${label}: wants one x-status, has ${[...statuses].join(", ") || "none"}`);
        continue;
      }
      const want = [...statuses][0];
      let body;
      try {
        if (bodyExamples[name]) body = await withLeases(bodyExamples[name].value, id);
      } catch (e) {
        fail(`${label}: ${e.message}`);
        continue;
      }
      const got = await send(m.toUpperCase(), target, body);
      sent++;
      if (p === "/v1/reserve" && got.status === 200) noteLeases(got);
      if (got.status !== want) {
        fail(`${label}: ${m.toUpperCase()} ${target} answered ${got.status}, not ${want}: ${got.text.slice(0, 300)}`);
        continue;
      }
      const key = String(got.status);
      const rkey = op.responses[key] ? key : op.responses[`${key[0]}XX`] ? `${key[0]}XX` : "default";
      if (!op.responses[rkey]) {
        fail(`${label}: the document lists no answer ${key}`);
        continue;
      }
      const [resp, parts] = deref(op.responses[rkey], ["paths", p, m, "responses", rkey]);
      if (!resp.content) {
        if (got.text !== "") fail(`${label}: answer ${key} has a body the document does not describe`);
        continue;
      }
      const media = got.type.split(";")[0].trim();
      if (!resp.content[media]) {
        fail(`${label}: answer ${key} is ${media || "untyped"}, which the document does not list`);
        continue;
      }
      if (!resp.content[media].schema) continue;
      let value = got.text;
      if (media === "application/json") {
        try {
          value = JSON.parse(got.text);
        } catch {
          fail(`${label}: answer ${key} is not JSON: ${got.text.slice(0, 200)}`);
          continue;
        }
      }
      const check = validatorAt([...parts, "content", media, "schema"]);
      if (!check(value))
        fail(`${label}: answer ${key} does not match its schema: ${ajv.errorsText(check.errors)}\n  ${got.text.slice(0, 400)}`);
    }
  }
}

server.kill("SIGTERM");
const end = await exited;
if (end.code !== 0) fail(`delayq-server did not drain and exit 0 after SIGTERM (${end.code ?? end.sig}):\n${serverErr}`);

const routes = listed.length;
if (failures.length) {
  console.error(failures.map((f) => "FAIL: " + f).join("\n"));
  console.error(`openapi: ${failures.length} failures (${routes} routes, ${sent} example requests sent)`);
  process.exit(1);
}
console.log(`openapi: the document is valid OpenAPI 3.1, has the ${routes} routes of --list-routes and no other, ` +
  `and ${sent} example requests answered as documented`);
