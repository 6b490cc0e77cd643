/**
 * `npm run fuzz`: random and mutated MQTT packets, CoAP datagrams and REST requests, generated
 * with fast-check, sent to `src/main.ts` running as a child process, on Postgres (a fresh
 * database, dropped afterwards) and on PGlite (a temporary DATA_DIR). Prints progress, a
 * report per store, appends it to bench/RESULTS.md, and exits 1 if a figure that must be 0
 * is not (a death, a server error, a row stored from a refused input, an error line in the server's
 * log or a line its logger did not write).
 *
 * Settings (environment, or `--name=value` flags with the FUZZ_ prefix dropped and lower-cased,
 * e.g. `npm run fuzz -- --inputs=20000 --stores=pglite`): FUZZ_INPUTS (per store, default
 * 1,000,000), FUZZ_STORES (postgres,pglite), FUZZ_SEED, FUZZ_EXCLUDE (invalid kinds left out:
 * deep,nul,surrogate,bignum,proto,type), FUZZ_MAX_DEPTH (6000), FUZZ_MAX_DEATHS (3: restarts
 * before giving up), FUZZ_MIX (mqtt:coap:rest shares, 5:3:2), FUZZ_WIDTH (in-flight scale, 1),
 * FUZZ_RESULTS (0: do not write bench/RESULTS.md), FUZZ_PG_ADMIN_URL, FUZZ_LOG (a path: the server's log
 * is written to `<path>.<store>`), FUZZ_CPU_PROF (a directory: the server's CPU profile).
 */
import { PGlite } from "@electric-sql/pglite"
import { appendFileSync } from "node:fs"
import { mkdtemp, rm } from "node:fs/promises"
import { createConnection } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import {
  createBenchDatabase,
  gitState,
  machine,
  machineCores,
  machineTicks,
  onShutdown,
  postgresCpuSeconds,
  runMain,
  utcDate,
  voltaicEnv
} from "../bench/harness.ts"
import { type EngineOptions, replayInput, runInputs } from "./engine.ts"
import { INVALIDITIES, type Invalidity, type Targets } from "./generators/index.ts"
import { judge, type Query } from "./oracle.ts"
import { failed, progress, storeSection, type StoreRun } from "./report.ts"
import { CoapSender } from "./senders/coap.ts"
import { httpTransport } from "./senders/rest.ts"
import { restCaller, seed } from "./seed.ts"
import { HOST, ROOT, ServerUnderTest } from "./server.ts"
import { Tally } from "./tally.ts"

const APP_KEY = "a_sk_fuzz_bootstrap_key_0123456789"

/** `--inputs=5` → FUZZ_INPUTS=5. */
for (const arg of process.argv.slice(2)) {
  const match = /^--([a-z-]+)=(.*)$/.exec(arg)
  if (match === null) throw new Error(`fuzz: unknown argument ${arg}; use --name=value (see fuzz/run.ts)`)
  process.env[`FUZZ_${match[1].replaceAll("-", "_").toUpperCase()}`] = match[2]
}

const setting = (name: string, fallback: string) => process.env[`FUZZ_${name}`] ?? fallback
const int = (name: string, fallback: number) => {
  const value = Number(setting(name, String(fallback)))
  if (!Number.isInteger(value) || value < 0) throw new Error(`FUZZ_${name}: expected a whole number, got ${setting(name, "")}`)
  return value
}

const count = int("INPUTS", 1_000_000)
const stores = setting("STORES", "postgres,pglite").split(",").filter((s) => s !== "")
const exclude = new Set(setting("EXCLUDE", "").split(",").filter((s) => s !== "").map((s) => {
  if (!(INVALIDITIES as ReadonlyArray<string>).includes(s)) throw new Error(`FUZZ_EXCLUDE: ${s} is not one of ${INVALIDITIES.join(", ")}`)
  return s as Invalidity
}))
const [mqttShare, coapShare, restShare] = setting("MIX", "5:3:2").split(":").map(Number)
const scale = Number(setting("WIDTH", "1"))
const width = (n: number) => Math.max(1, Math.round(n * scale))

const options: EngineOptions = {
  count,
  seed: int("SEED", Math.floor(Math.random() * 2 ** 30)),
  payload: { exclude, maxDepth: int("MAX_DEPTH", 6_000) },
  mix: { mqtt: mqttShare, coap: coapShare, rest: restShare },
  width: { mqtt: width(16), odd: width(32), raw: width(64), coap: width(64), coapOdd: width(512), rest: width(32) },
  timeoutMs: 30_000,
  shortTimeoutMs: 1_000
}

const fuzzStore = async (store: string): Promise<StoreRun> => {
  const env = voltaicEnv(HOST, APP_KEY, "")
  let query: () => Promise<{ query: Query; close: () => Promise<void> }>
  let postgresCpu = () => 0
  let cleanup: () => Promise<void>
  if (store === "postgres") {
    const db = await createBenchDatabase(setting("PG_ADMIN_URL", process.env.TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/test"), "voltaic_fuzz")
    env.DATABASE_URL = db.url
    query = async () => ({ query: (s, p) => db.query(s, p), close: async () => {} })
    cleanup = db.drop
    postgresCpu = () => postgresCpuSeconds(db.name)
  } else if (store === "pglite") {
    const dir = await mkdtemp(join(tmpdir(), "voltaic-fuzz-"))
    delete env.DATABASE_URL
    env.DATA_DIR = dir
    query = async () => {
      const db = await PGlite.create({ dataDir: dir })
      return { query: async (s, p) => (await db.query<Record<string, unknown>>(s, [...p])).rows, close: () => db.close() }
    }
    cleanup = () => rm(dir, { recursive: true, force: true })
  } else throw new Error(`FUZZ_STORES: ${store} is not postgres or pglite`)
  env.ADMIN_PASSWORD = "fuzz admin password"
  const logPath = process.env.FUZZ_LOG === undefined ? undefined : `${process.env.FUZZ_LOG}.${store}`
  // Also run on SIGINT/SIGTERM or the watchdog (runMain), newest first: the server stops before its store goes.
  const dropStore = onShutdown(cleanup)
  const server = new ServerUnderTest(env, int("MAX_DEATHS", 3), logPath)
  const stopServer = onShutdown(() => server.stop())
  try {
    await server.start()
    const call = restCaller((path, init) => fetch(`http://${HOST}:${server.ports.http}${path}`, init), APP_KEY)
    const seeded = await seed(call)
    const targets: Targets = { appKey: APP_KEY, valid: seeded.devices.valid, invalid: seeded.devices.invalid, odd: seeded.devices.odd, frozen: seeded.devices.frozen.id }
    const tally = new Tally(count)
    const coap = new CoapSender(HOST, () => server.ports.coap)
    const transports = {
      openMqtt: () => createConnection({ host: HOST, port: server.ports.mqtt }),
      coap,
      http: httpTransport(HOST, () => server.ports.http, options.width.rest, options.timeoutMs)
    }
    const cpuBefore = { server: server.cpuSeconds(), postgres: postgresCpu(), fuzzer: process.cpuUsage(), ticks: machineTicks() }
    const startedAt = Date.now()
    const ticker = setInterval(() => console.log(progress(store, tally, count, startedAt, server.deaths.length)), 5_000)
    const run = runInputs(transports, targets, { ...options, gate: server.gate }, tally)
    let aborted: string | undefined
    await run.done.catch((error: unknown) => (aborted = error instanceof Error ? error.message : String(error)))
    clearInterval(ticker)
    const seconds = (Date.now() - startedAt) / 1000
    const fuzzerCpu = process.cpuUsage(cpuBefore.fuzzer)
    const cpu = {
      server: server.cpuSeconds() - cpuBefore.server,
      postgres: postgresCpu() - cpuBefore.postgres,
      fuzzer: (fuzzerCpu.user + fuzzerCpu.system) / 1e6,
      machineCores: machineCores(cpuBefore.ticks, machineTicks())
    }
    console.log(progress(store, tally, count, startedAt, server.deaths.length))
    await Promise.all([...run.sessions.values()].map((s) => s.close()))
    coap.close()
    let frozenMoved = 1
    if (aborted === undefined) {
      const frozen = await call("GET", `/devices/${targets.frozen}`)
      frozenMoved = frozen.updatedAt === seeded.frozenUpdatedAt ? 0 : 1
    }
    await stopServer()
    let findings
    if (aborted === undefined) {
      const db = await query()
      try {
        findings = await judge(db.query, targets, tally, count)
        findings.storedFromInvalid["device updates (frozen device changed)"] = frozenMoved
      } finally {
        await db.close()
      }
    }
    const replays = Object.entries(findings?.examples ?? {}).flatMap(([kind, seqs]) => seqs.map((seq) => ({ kind, input: replayInput(targets, options, seq) })))
    const sessions = [...run.sessions.values()]
    return {
      store: store === "postgres" ? "Postgres (fresh database)" : "PGlite (temporary DATA_DIR)",
      seconds,
      cpu,
      tally,
      findings,
      deaths: server.deaths,
      healthChecks: server.healthChecks,
      healthFailures: server.healthFailures,
      defects: server.defects,
      mqttConnects: sessions.reduce((s, x) => s + x.connects, 0),
      mqttDeliveries: sessions.reduce((s, x) => s + x.deliveries, 0),
      coapStrays: coap.strays,
      replays,
      aborted
    }
  } finally {
    await stopServer()
    await dropStore()
  }
}

runMain("fuzz", 60 * 60_000, async () => {
  console.log(`fuzz: ${count.toLocaleString("en-US")} inputs per store on ${stores.join(", ")}; seed ${options.seed}` +
    `${exclude.size > 0 ? `; leaving out ${[...exclude].join(", ")}` : ""}`)
  const runs: Array<StoreRun> = []
  for (const store of stores) {
    const run = await fuzzStore(store)
    runs.push(run)
    console.log(`\n${storeSection(run)}`)
  }
  if (setting("RESULTS", "1") !== "0") {
    const section = [
      "",
      `## Fuzzing (npm run fuzz): ${utcDate()}`,
      "",
      "`npm run fuzz` (fuzz/run.ts): inputs generated with fast-check (fuzz/generators/) sent to `src/main.ts` running as a child",
      "process: MQTT packets built with mqtt-packet (valid and byte-mutated CONNECT, PUBLISH on every topic form, SUBSCRIBE,",
      "UNSUBSCRIBE, PINGREQ, garbage), CoAP datagrams built with coap-packet (POST /events and /locations with random payloads",
      "and options, mutated bytes, garbage) and REST requests (random bodies, query strings, headers, methods, paths, long URLs).",
      "Valid inputs use the device and application keys of the run and carry their sequence number as their timestamp; known-invalid",
      "ones (nesting past 64 levels, NUL, lone surrogates, 1e400, `__proto__`/`constructor`/`prototype` keys, wrong types) aim only at",
      "a device of their own, so any row of it is a refused input that was stored.",
      "",
      `- Machine: ${machine()}. Postgres runs on the same machine, sharing its cores. Server from ${gitState(ROOT, ["src", "fuzz"])}.`,
      `- ${count.toLocaleString("en-US")} inputs per store, seed ${options.seed}, shares mqtt:coap:rest ${options.mix.mqtt}:${options.mix.coap}:${options.mix.rest}, ` +
      `in flight: ${options.width.mqtt} per MQTT session lane (5 lanes), ${options.width.odd} mutated-packet sessions, ${options.width.raw} raw connections, ` +
      `${options.width.coap} CoAP (+${options.width.coapOdd} mutated or garbage datagrams), ${options.width.rest} HTTP; deepest nesting ${options.payload.maxDepth}` +
      `${exclude.size > 0 ? `; known-invalid kinds left out: ${[...exclude].join(", ")}` : ""}.`,
      "",
      ...runs.map(storeSection)
    ].join("\n")
    appendFileSync(join(ROOT, "bench", "RESULTS.md"), `${section}\n`)
    console.log("fuzz: appended to bench/RESULTS.md")
  }
  const bad = runs.filter(failed)
  console.log(bad.length === 0 ? "fuzz: every figure that must be 0 is 0" : `fuzz: FAILED on ${bad.map((r) => r.store).join(", ")}`)
  return bad.length === 0 ? 0 : 1
})
