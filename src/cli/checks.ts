import { connect } from "@nats-io/transport-node"
import { Effect, Option } from "effect"
import { X509Certificate } from "node:crypto"
import { createSocket } from "node:dgram"
import { existsSync } from "node:fs"
import { readFile } from "node:fs/promises"
import { createServer, isIPv6 } from "node:net"
import { join } from "node:path"
import { tlsProblem } from "../adapters/tls.ts"
import { describeStartupFailure } from "../startupFailure.ts"
import type { AppConfig } from "../config.ts"
import { databaseTarget, enabledListeners, type Listener, portClashes } from "../config.ts"
import { dataDirHolder } from "../store/dataDirLock.ts"
import { loadMigrations } from "../store/migrate.ts"
import { Sql } from "../store/Sql.ts"
import { portHolder } from "./portHolder.ts"
import { describeTarget } from "./store.ts"

/**
 * The checks of `voltaic doctor`, each a verdict per thing checked: passed, a warning (works
 * now, needs attention), or failed with what is wrong and how to fix it. None of them
 * changes anything: no migration, no database created, no lock taken from a server.
 */

export interface Verdict {
  readonly status: "ok" | "warn" | "fail"
  /** What was checked: the setting, or `database`, `configuration`. */
  readonly subject: string
  readonly detail: string
}

const ok = (subject: string, detail: string): Verdict => ({ status: "ok", subject, detail })
const warn = (subject: string, detail: string): Verdict => ({ status: "warn", subject, detail })
const fail = (subject: string, detail: string): Verdict => ({ status: "fail", subject, detail })

const reason = (cause: unknown) => (cause instanceof Error ? cause.message : String(cause))
const errorCode = (cause: unknown) => (typeof cause === "object" && cause !== null && "code" in cause ? String(cause.code) : "")

/** Binds the port as the server would (same host, no port sharing) and lets it go. */
const tryBind = (listener: Listener, host: string): Promise<unknown> =>
  new Promise((resolve) => {
    if (listener.protocol === "udp") {
      const socket = createSocket(isIPv6(host) ? "udp6" : "udp4")
      socket.once("error", (error) => {
        socket.close()
        resolve(error)
      })
      socket.bind(listener.port, host, () => socket.close(() => resolve(undefined)))
    } else {
      const server = createServer()
      server.once("error", resolve)
      server.listen(listener.port, host, () => server.close(() => resolve(undefined)))
    }
  })

const portVerdict = async (listener: Listener, host: string, clashes: ReadonlyMap<string, string>): Promise<Verdict> => {
  const { setting, port, protocol } = listener
  const address = `${host}:${port}${protocol === "udp" ? " (UDP)" : ""}`
  if (port === 0) return ok(setting, `0: the system picks a free port at each start`)
  // As a start refuses it (`portClashes`): the second of two listeners on one port.
  const clash = clashes.get(setting)
  if (clash !== undefined) return fail(setting, clash)
  const error = await tryBind(listener, host)
  if (error === undefined) return ok(setting, `${address} is free`)
  const code = errorCode(error)
  if (code === "EADDRINUSE") {
    const holder = await portHolder(port, protocol)
    const by = holder === undefined ? "" : ` by process ${holder.pid} (${holder.command})`
    return fail(setting, `${address} is already in use${by}: stop it, or set ${setting} to another port`)
  }
  if (code === "EACCES") return fail(setting, `${address} is not permitted: ports below 1024 need root or CAP_NET_BIND_SERVICE; or set ${setting} above 1023`)
  if (code === "EADDRNOTAVAIL") return fail(setting, `${host} is not an address of this host: fix HOST`)
  return fail(setting, `${address} cannot be opened (${reason(error)})`)
}

/** Each listener's port free to bind (or a clash, with who holds it where Linux tells). */
export const checkPorts = (config: AppConfig): Effect.Effect<Array<Verdict>> =>
  Effect.promise(async () => {
    const clashes = new Map(portClashes(config).map((c) => [c.setting, c.message]))
    const verdicts: Array<Verdict> = []
    for (const listener of enabledListeners(config)) verdicts.push(await portVerdict(listener, config.host, clashes))
    return verdicts
  })

/** The migrations recorded in the database against those of this version: pending, unknown. */
const schemaVerdict = (where: string) =>
  Effect.gen(function*() {
    const sql = yield* Sql
    const known = yield* loadMigrations
    const [table] = yield* sql.query<{ present: boolean }>("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")
    const applied = table?.present
      ? new Set((yield* sql.query<{ version: number }>("SELECT version FROM schema_migrations")).map((r) => Number(r.version)))
      : new Set<number>()
    const pending = known.filter((m) => !applied.has(m.version))
    const unknown = [...applied].filter((v) => !known.some((m) => m.version === v)).sort((a, b) => a - b)
    if (unknown.length > 0) {
      return fail("database", `${where} has migrations this version of Voltaic does not know (${unknown.join(", ")}): a newer version migrated it; run that one`)
    }
    if (pending.length > 0) {
      const names = pending.length <= 3 ? pending.map((m) => m.name).join(", ") : `${pending[0].name} … ${pending.at(-1)!.name}`
      return fail(
        "database",
        `${where}: ${pending.length} of ${known.length} migrations not applied (${names}): run voltaic migrate (a start applies them too)`
      )
    }
    return ok("database", `${where}: reachable, the schema is current (${known.length} migrations)`)
  })

/**
 * The database reachable and its migrations current. PGlite's directory is opened only when
 * no process holds it: a running server's is reported as such, unopened; a directory holding
 * no database yet is reported without creating one.
 */
export const checkDatabase = (config: AppConfig): Effect.Effect<Verdict> => {
  const target = databaseTarget(config)
  const where = describeTarget(target)
  if (target._tag === "pglite" && target.dataDir === undefined) {
    return Effect.succeed(ok("database", `${where} (DATABASE_URL=memory://): made afresh at each start, nothing to check`))
  }
  const opened = schemaVerdict(where).pipe(
    Effect.catchTag("SqlError", (error) => Effect.succeed(fail("database", `${where}: ${error.message}`))),
    Effect.provide(Sql.layer(target, "voltaic doctor")),
    // StoreUnreachable, DataDirLocked: one line naming the setting, as a start prints it.
    Effect.catchCause((cause) => Effect.succeed(fail("database", describeStartupFailure(cause))))
  )
  if (target._tag === "postgres") return opened
  const dataDir = target.dataDir!
  return Effect.flatMap(Effect.promise(() => dataDirHolder(dataDir)), (holder) => {
    if (holder !== undefined) {
      return Effect.succeed(warn("database", `${where} is held by ${holder}: a server runs on it; not opened here, so its schema was not checked`))
    }
    if (!existsSync(join(dataDir, "PG_VERSION"))) {
      return Effect.succeed(fail("database", `${where}: no database there yet: run voltaic migrate (a first start creates it too), or fix DATA_DIR`))
    }
    return opened
  })
}

/** How long the NATS check waits for the server. */
const NATS_TIMEOUT_MS = 3_000

/** NATS at `NATS_URL` answers (when set: unset is the in-process bus, one process alone). */
export const checkNats = (config: AppConfig): Effect.Effect<Array<Verdict>> => {
  if (Option.isNone(config.natsUrl)) return Effect.succeed([])
  const url = config.natsUrl.value
  return Effect.promise(async () => {
    try {
      const nc = await connect({ servers: url, name: "voltaic doctor", timeout: NATS_TIMEOUT_MS, reconnect: false, maxReconnectAttempts: 0 })
      const version = nc.info?.version
      await nc.close()
      return [ok("NATS_URL", `${url} answers${version === undefined ? "" : ` (NATS ${version})`}`)]
    } catch (cause) {
      return [fail("NATS_URL", `cannot reach NATS at ${url} (${reason(cause)}): start NATS there, or fix NATS_URL (unset, one process uses its in-process bus)`)]
    }
  })
}

/** Days left under which a certificate gets a warning. */
const RENEW_WITHIN_DAYS = 30
const DAY_MS = 86_400_000

const readPem = (setting: string, file: string): Promise<string | Verdict> =>
  readFile(file, "utf8").catch((cause: unknown) => fail(setting, `${file} cannot be read (${reason(cause)})`))

/**
 * The certificate and key of `TLS_CERT_FILE` and `TLS_KEY_FILE`: readable, parsed, the key the
 * certificate's, and the certificate in its validity period (a warning within 30 days of its end).
 */
export const checkTls = (config: AppConfig, now: number): Effect.Effect<Array<Verdict>> => {
  if (Option.isNone(config.tls)) return Effect.succeed([])
  const { certFile, keyFile } = config.tls.value
  return Effect.promise(async (): Promise<Array<Verdict>> => {
    const [certPem, keyPem] = await Promise.all([readPem("TLS_CERT_FILE", certFile), readPem("TLS_KEY_FILE", keyFile)])
    if (typeof certPem !== "string" || typeof keyPem !== "string") {
      return [certPem, keyPem].filter((v): v is Verdict => typeof v !== "string")
    }
    const cert = tlsProblem(certFile, certPem, keyFile, keyPem)
    if (!(cert instanceof X509Certificate)) return [fail(cert.setting, cert.message)]
    const from = Date.parse(cert.validFrom)
    const to = Date.parse(cert.validTo)
    const name = cert.subject.replaceAll("\n", ", ")
    const until = new Date(to).toISOString().slice(0, 10)
    if (now < from) return [fail("TLS_CERT_FILE", `the certificate in ${certFile} (${name}) is not valid before ${new Date(from).toISOString()}: check the clock, or the certificate`)]
    if (now >= to) return [fail("TLS_CERT_FILE", `the certificate in ${certFile} (${name}) expired on ${until}: renew it`)]
    const days = Math.floor((to - now) / DAY_MS)
    if (days < RENEW_WITHIN_DAYS) {
      return [warn("TLS_CERT_FILE", `the certificate in ${certFile} (${name}) expires in ${days} day${days === 1 ? "" : "s"}, on ${until}: renew it soon`)]
    }
    return [ok("TLS", `${certFile} (${name}) is valid until ${until}, and ${keyFile} is its key`)]
  })
}
