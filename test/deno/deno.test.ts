import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import http from "node:http"
import https from "node:https"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import mqtt from "mqtt"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

const ROOT = fileURLToPath(new URL("../../", import.meta.url))
const DENO = fileURLToPath(new URL("../../node_modules/.bin/deno", import.meta.url))
const KEY = "a_sk_deno_smoke_key_0123456789"
const ADMIN_EMAIL = "owner@example.com"
const ADMIN_PASSWORD = "correct horse battery"

/** A cold Deno start (module analysis, PGlite's WASM) takes seconds; this bounds a server that never comes up. */
const STARTUP_LIMIT_MS = 90_000
const SHUTDOWN_LIMIT_MS = 10_000

/** Only what Deno needs to run, so settings of the calling shell (DATA_DIR, NATS_URL…) cannot leak in. */
const inherited = ["PATH", "HOME", "TMPDIR", "DENO_DIR", "XDG_CACHE_HOME"].flatMap((name) => {
  const value = process.env[name]
  return value === undefined ? [] : [[name, value] as const]
})

/** A certificate for 127.0.0.1 made for this run: the TLS listeners under Deno (node:tls for MQTT, Deno.serve for HTTPS). */
const tlsDir = mkdtempSync(join(tmpdir(), "voltaic-deno-tls-"))
execFileSync("openssl", [
  "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=voltaic-deno",
  "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", join(tlsDir, "key.pem"), "-out", join(tlsDir, "cert.pem")
], { stdio: "ignore" })
const CA = readFileSync(join(tlsDir, "cert.pem"))

const env = {
  ...Object.fromEntries(inherited),
  TLS_CERT_FILE: join(tlsDir, "cert.pem"),
  TLS_KEY_FILE: join(tlsDir, "key.pem"),
  HTTPS_PORT: "0",
  MQTTS_PORT: "0",
  // MQTT over WebSocket does not complete its handshake under Deno 2.9 (README).
  MQTT_WSS_PORT: "off",
  NO_COLOR: "1",
  PORT: "0",
  MQTT_PORT: "0",
  MQTT_WS_PORT: "0",
  COAP_PORT: "0",
  HOST: "127.0.0.1",
  DATABASE_URL: "memory://",
  BOOTSTRAP_APP_KEY: KEY,
  ADMIN_EMAIL,
  ADMIN_PASSWORD,
  // Two failures lock an account out from an address, at once: the sign-in test stays short.
  SIGN_IN_MAX_FAILURES: "2",
  SIGN_IN_DELAY_STEP_MS: "0",
  LOG_LEVEL: "info"
}

interface Server {
  readonly child: ChildProcess
  readonly port: number
  output(): string
}

/** Starts `deno task start` and resolves with the port of its `http listening` line. */
const startServer = (): Promise<Server> =>
  new Promise((resolve, reject) => {
    // Its own process group, so `deno task` and the `deno run` below it can be ended together.
    const child = spawn(DENO, ["task", "start"], { cwd: ROOT, env, detached: true, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    let settled = false
    const settle = (result: { port: number } | { error: Error }) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      child.off("exit", onExit)
      if ("error" in result) {
        stopServer(child).finally(() => reject(result.error))
      } else {
        resolve({ child, port: result.port, output: () => output })
      }
    }
    // Stays attached after start-up: it drains the pipes and keeps the log for failure messages.
    const onData = (chunk: Buffer) => {
      output += chunk.toString()
      const match = /http listening on 127\.0\.0\.1:(\d+)/.exec(output)
      if (match) settle({ port: Number(match[1]) })
    }
    const onExit = (code: number | null, signal: NodeJS.Signals | null) =>
      settle({ error: new Error(`deno exited (${code ?? signal}) before listening:\n${output}`) })
    const timer = setTimeout(
      () => settle({ error: new Error(`no "http listening" line within ${STARTUP_LIMIT_MS} ms:\n${output}`) }),
      STARTUP_LIMIT_MS
    )
    child.stdout?.on("data", onData)
    child.stderr?.on("data", onData)
    child.once("exit", onExit)
    child.once("error", (error) => settle({ error }))
  })

const hasExited = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null

/**
 * SIGTERM to `deno task`, which passes it on to the server; the whole group is killed if
 * that has not ended it in time. Resolves with the exit code of `deno task`.
 */
const stopServer = (child: ChildProcess): Promise<number | null> =>
  new Promise((resolve) => {
    const pid = child.pid
    if (pid === undefined || hasExited(child)) return resolve(child.exitCode)
    const timer = setTimeout(() => {
      try {
        process.kill(-pid, "SIGKILL")
      } catch {
        // the group is already gone
      }
    }, SHUTDOWN_LIMIT_MS)
    child.once("exit", (code) => {
      clearTimeout(timer)
      resolve(code)
    })
    child.kill("SIGTERM")
  })

describe("the server on Deno 2", () => {
  let server: Server | undefined
  let origin = ""

  beforeAll(async () => {
    server = await startServer()
    origin = `http://127.0.0.1:${server.port}`
  }, STARTUP_LIMIT_MS + SHUTDOWN_LIMIT_MS + 5_000)

  afterAll(async () => {
    rmSync(tlsDir, { recursive: true, force: true })
    if (server === undefined) return
    // A graceful shutdown on SIGTERM ends `deno task` with the server's exit code, 0.
    expect(await stopServer(server.child), server.output()).toBe(0)
  }, SHUTDOWN_LIMIT_MS + 5_000)

  const url = (path: string) => `${origin}${path}`

  /** The port a listener logged; the start resolved on the `http` line, which may come before the others. */
  const portOf = async (listener: string) => {
    const deadline = Date.now() + 10_000
    for (;;) {
      const match = new RegExp(`${listener} listening on 127\\.0\\.0\\.1:(\\d+)`).exec(server?.output() ?? "")
      if (match !== null) return Number(match[1])
      if (Date.now() > deadline) throw new Error(`no "${listener} listening" line:\n${server?.output()}`)
      await new Promise((r) => setTimeout(r, 50))
    }
  }

  it("serves HTTPS and MQTT over TLS from TLS_CERT_FILE, trusted with its CA only", async () => {
    const httpsPort = await portOf("https")
    const mqttsPort = await portOf("mqtts")
    const get = (path: string, ca?: Buffer) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        https.get({ host: "127.0.0.1", port: httpsPort, path, ca, headers: { authorization: `Bearer ${KEY}` } }, (res) => {
          let text = ""
          res.on("data", (chunk) => (text += chunk))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }))
        }).on("error", reject)
      })
    const health = await get("/health", CA)
    expect(health.status).toBe(200)
    expect(JSON.parse(health.body)).toEqual({ status: "ok" })
    await expect(get("/health")).rejects.toThrow(/self[- ]signed/)

    const space = await fetch(url("/v1/spaces"), {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "TLS" })
    }).then((r) => r.json() as Promise<{ id: string }>)
    const device = await fetch(url("/v1/devices"), {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "Over TLS", space: { id: space.id } })
    }).then((r) => r.json() as Promise<{ id: string; secretKey: string }>)
    const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${mqttsPort}`, { ca: CA, username: device.secretKey, password: " ", reconnectPeriod: 0 })
    try {
      await client.publishAsync("events", JSON.stringify({ name: "tls", data: 7 }), { qos: 1 })
    } finally {
      await client.endAsync(true)
    }
    const events = await get(`/v1/events?device.id=${device.id}&name=tls`, CA)
    expect(JSON.parse(events.body).events.map((e: { data: unknown }) => e.data)).toEqual([7])
    await expect(mqtt.connectAsync(`mqtts://127.0.0.1:${mqttsPort}`, { username: device.secretKey, password: " ", reconnectPeriod: 0, connectTimeout: 5_000 }))
      .rejects.toThrow(/self[- ]signed/)

    // /metrics under Deno: the same exposition, counting what was just done.
    const metrics = await fetch(url("/metrics")).then((r) => r.text())
    expect(metrics).toMatch(/^voltaic_events_ingested_total\{protocol="mqtt",outcome="stored"\} 1$/m)
    expect(metrics).toContain("# TYPE voltaic_http_request_duration_seconds histogram")
  })

  it("answers /health with status ok", async () => {
    const res = await fetch(url("/health"))
    expect(res.status).toBe(200)
    expect(await res.json()).toEqual({ status: "ok" })
  })

  it("accepts the bootstrap application key on /v1/whoami", async () => {
    const res = await fetch(url("/v1/whoami"), { headers: { authorization: `Bearer ${KEY}` } })
    expect(res.status).toBe(200)
    const body = await res.json() as { kind: string }
    expect(body.kind).toBe("app")
  })

  it("refuses /v1/whoami without a credential", async () => {
    const res = await fetch(url("/v1/whoami"))
    expect(res.status).toBe(401)
  })

  it("throttles sign-ins per address: another loopback address still gets in during a lockout", async () => {
    // node:http, which can choose the source address; all of 127.0.0.0/8 is loopback on Linux.
    const signIn = (password: string, localAddress: string) =>
      new Promise<{ status: number; retryAfter: string | undefined }>((resolve, reject) => {
        const payload = Buffer.from(JSON.stringify({ username: ADMIN_EMAIL, password }))
        const req = http.request(url("/v1/auth/token"), {
          method: "POST",
          localAddress,
          headers: { "x-app-key": KEY, "content-type": "application/json", "content-length": payload.length }
        }, (res) => {
          res.resume()
          const retryAfter = res.headers["retry-after"]
          res.on("end", () => resolve({ status: res.statusCode ?? 0, retryAfter: typeof retryAfter === "string" ? retryAfter : undefined }))
        })
        req.on("error", reject)
        req.end(payload)
      })
    expect((await signIn("guess", "127.0.0.1")).status).toBe(401)
    expect((await signIn("guess", "127.0.0.1")).status).toBe(401)
    const locked = await signIn(ADMIN_PASSWORD, "127.0.0.1")
    expect(locked.status).toBe(429)
    expect(Number(locked.retryAfter)).toBeGreaterThan(0)
    expect((await signIn(ADMIN_PASSWORD, "127.0.0.2")).status).toBe(200)
  })

  it("refuses GET /commands' parameters in a body, which Deno.serve drops, and takes them from the query", async () => {
    const post = async (path: string, body: unknown) => {
      const res = await fetch(url(`/v1${path}`), {
        method: "POST",
        headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
        body: JSON.stringify(body)
      })
      expect(res.status).toBe(200)
      return await res.json() as { id: string }
    }
    // fetch sends no body with a GET; node:http does.
    const listWithBody = (body: unknown) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const payload = Buffer.from(JSON.stringify(body))
        const req = http.request(url("/v1/commands"), {
          method: "GET",
          headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json", "content-length": payload.length }
        }, (res) => {
          let text = ""
          res.on("data", (chunk) => (text += chunk))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }))
        })
        req.on("error", reject)
        req.end(payload)
      })
    const space = await post("/spaces", { name: "Deno" })
    const one = await post("/devices", { name: "One", space: { id: space.id } })
    const two = await post("/devices", { name: "Two", space: { id: space.id } })
    await post("/commands", { name: "Open", device: { id: one.id } })
    await post("/commands", { name: "Close", device: { id: two.id } })
    // Node reads it (test/e2e/traffic.e2e.test.ts); Deno never hands it over, so it is refused, not ignored.
    const refused = await listWithBody({ device: { id: two.id } })
    expect(refused.status).toBe(400)
    expect(JSON.parse(refused.body).error).toMatchObject({ field: "body", message: expect.stringMatching(/query string/) })
    const listed = await fetch(url(`/v1/commands?device.id=${two.id}`), { headers: { authorization: `Bearer ${KEY}` } })
    expect((await listed.json() as { commands: Array<{ name: string }> }).commands.map((c) => c.name)).toEqual(["Close"])
  })
})
