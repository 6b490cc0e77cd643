import { PgClient } from "@effect/sql-pg"
import { Config, ConfigProvider, Context, Effect, Layer, Option } from "effect"
import {
  HttpRunner,
  RunnerAddress,
  RunnerHealth,
  Runners,
  Sharding,
  ShardingConfig,
  SingleRunner,
  SqlMessageStorage,
  SqlRunnerStorage
} from "effect/cluster"
import { Digest } from "effect/crypto"
import { FetchHttpClient, HttpClient, HttpClientRequest, HttpEffect } from "effect/http"
import { RpcSerialization } from "effect/rpc"
import { hostname } from "node:os"
import { HttpPort } from "../adapters/http/HttpServer.ts"
import { AppConfig, databaseTarget } from "../config.ts"
import { Sql } from "../store/Sql.ts"
import { layerPglite } from "./pgliteSqlClient.ts"

/**
 * Effect's cluster (`effect/cluster`) under Voltaic's entities: which process owns each device
 * bucket, space and alert, and the stored messages between them (persisted, delivered at a time).
 *
 * - Embedded default (PGlite): one runner (`SingleRunner`) whose messages are tables of the same
 *   PGlite database, through an `effect/sql` client over the store's instance
 *   (`pgliteSqlClient.ts`: `@effect/sql-pglite` does not load with effect 4.1). Its shards are
 *   held in memory (`runnerStorage: "memory"`): one process holds a DATA_DIR (`dataDirLock.ts`)
 *   and `memory://` is the process's own, so no other runner can exist to take them. In the
 *   database their 300 leases were refreshed every 2 s, one statement over 300 ids and 300
 *   updates (25 ms of PGlite's one thread, a stall in every command run behind it), and a
 *   shutdown released them one by one.
 * - Postgres: every process is a runner. Runners register in Postgres, hold their shards with
 *   advisory locks and call each other over HTTP at `RUNNER_PATH` on their own REST port
 *   (no extra port), guarded by a secret every process reads from the shared store
 *   (`cluster_secret`, migration 0009): nothing to configure, and nobody without the
 *   database can post to the endpoint. Its `SqlClient` is `@effect/sql-pg`, a pool of 16 of
 *   its own (4 queued the stored messages of a burst): the store's postgres.js
 *   pool reads int8 as JS numbers, which round the cluster's 64-bit message ids
 *   (docs/cluster-spike.md).
 *
 * Timings (`CLUSTER_TIMINGS`): a runner that stops answering pings (every second, five tries) is
 * marked unhealthy by the runner that holds the health-check singleton, and its shards move about
 * 4 s after a kill -9 (its advisory locks ended with its session); when the dead runner held that
 * singleton, once its heartbeat is older than the lock expiry (6 s). Shard locks are refreshed
 * every 2 s, which is also the refresh's deadline; a miss releases every shard and interrupts
 * every entity on it, and their devices are read back from the store. With 1,024 device buckets,
 * a burst of 10,000 offline alerts among 100,000 hosted devices (bench:actors) made the
 * refresh's `pg_locks` read take over a second, and 1, 2 and 3 s deadlines each ended in a
 * collapse (2 s: 7,072 of 10,000 alerts after 78 s), so they were 5 s / 15 s; with 64 buckets
 * (a few hundred cluster messages and statements for that burst, not thousands) the same burst
 * ran at 2 s / 6 s with no refresh missed (2026-11-26, p99 to the row 1.47 s). The deadline is
 * missed by any stall of the event loop over 2 s, whatever Postgres answers (the timeout's timer
 * runs before the socket is read): 64 buckets rehydrating 100,000 devices at once held it 6–14 s
 * until their steps yielded (`entities/breathe.ts`); since then the worst stall in bench:actors'
 * bursts is 0.2–0.6 s, bar the benchmark's own forced full GC.
 * Stored messages are polled every 250 ms. Offline deadlines are no stored messages: a bucket's
 * own timer fires them, and its devices' rows keep them for a new owner (`entities/overdue.ts`).
 */

export const RUNNER_PATH = "/cluster/runner"
export const SECRET_HEADER = "x-voltaic-cluster"

export const CLUSTER_TIMINGS = {
  shardLockRefreshInterval: "2 seconds",
  shardLockExpiration: "6 seconds",
  refreshAssignmentsInterval: "1 second",
  runnerHealthCheckInterval: "1 second",
  entityMessagePollInterval: "250 millis",
  entityReplyPollInterval: "250 millis",
  sendRetryInterval: "50 millis",
  // Messages to entities of this process are handed over as they are, not encoded and decoded
  // on the way (the default, which simulates a remote send): every payload is built fresh by its
  // sender and never changed after, and a remote send still goes through the schemas.
  simulateRemoteSerialization: false
} satisfies Partial<ShardingConfig.ShardingConfig["Service"]>

/**
 * How often PGlite's single runner reads the stored messages it was not told of. It is told of
 * every one: each is sent by this process, and a send wakes the read at once, as does taking its
 * shards at a start (messages left by the last run). The timed read is a fallback, and on PGlite
 * it is not free: one statement over the 300 shards (`shard_id IN (…)`, planned each time) held
 * PGlite's only thread 4-12 ms every 250 ms, and any command run or event batch behind it waited.
 */
export const SINGLE_RUNNER_POLL = "5 seconds"

/**
 * The timings the cluster runs with: `CLUSTER_TIMINGS` unless a test provides others. Tests on
 * TestClock (test/entities/support.ts) hold their shard locks for hours of their clock: a lock
 * refresh's deadline is a real-time matter, and on TestClock a step of the test could pass it while
 * the refresh was still in the store, releasing every shard (and a message then waited for them).
 */
export const ClusterTimings = Context.Reference<Partial<ShardingConfig.ShardingConfig["Service"]>>("voltaic/cluster/ClusterTimings", {
  defaultValue: () => CLUSTER_TIMINGS
})

/** The runner endpoint of this process, served by the HTTP app (Postgres only). */
export class RunnerEndpoint extends Context.Service<RunnerEndpoint, {
  readonly secret: string
  readonly handle: (request: Request) => Promise<Response>
}>()("voltaic/cluster/RunnerEndpoint") {}

/** The cluster's `effect/sql` client for the configured store. */
const ClusterSqlLive = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  const target = databaseTarget(config)
  if (target._tag === "postgres") {
    return Layer.orDie(PgClient.layer({ url: target.url, maxConnections: 16, applicationName: "voltaic cluster" }))
  }
  const sql = yield* Sql
  if (sql.embedded === undefined) return yield* Effect.die(new Error("cluster: the PGlite store exposes no database"))
  return layerPglite(sql.embedded)
}))

const readSecret = Effect.gen(function*() {
  const sql = yield* Sql
  const [row] = yield* sql.query<{ secret: string }>("SELECT secret FROM cluster_secret WHERE id = 1")
  if (row === undefined) return yield* Effect.die(new Error("cluster: no cluster_secret row (migration 0009 missing)"))
  return row.secret
}).pipe(Effect.orDie)

/** Where other runners reach this process: CLUSTER_HOST, else HOST unless it is a wildcard, else the host name. */
const advertisedHost = (config: AppConfig) =>
  Option.getOrElse(config.clusterHost, () => config.host === "0.0.0.0" || config.host === "::" ? hostname() : config.host)

/** Fetch with the cluster secret on every call to another runner. */
const secretHttpClient = (secret: string) =>
  Layer.effect(
    HttpClient.HttpClient,
    Effect.map(HttpClient.HttpClient, (client) => HttpClient.mapRequest(client, HttpClientRequest.setHeader(SECRET_HEADER, secret)))
  ).pipe(Layer.provide(FetchHttpClient.layer))

const httpRunner = (address: RunnerAddress.RunnerAddress, secret: string, timings: Partial<ShardingConfig.ShardingConfig["Service"]>) =>
  Sharding.layer.pipe(
    // A runner whose endpoint stops answering pings is marked unhealthy and its shards move.
    Layer.provide(RunnerHealth.layerPing),
    Layer.provideMerge(Runners.layerRpc),
    Layer.provide(HttpRunner.layerClientProtocolHttp({ path: RUNNER_PATH })),
    Layer.provideMerge(SqlMessageStorage.layer),
    Layer.provide(Layer.orDie(SqlRunnerStorage.layer)),
    Layer.provide(ShardingConfig.layer({ ...timings, runnerAddress: Option.some(address) })),
    Layer.provide([secretHttpClient(secret), RpcSerialization.layerJson, Digest.layerWebCrypto])
  )

/** Serves calls from other runners: a fetch handler for the HTTP app. */
const endpointLayer = (secret: string) =>
  Layer.effect(
    RunnerEndpoint,
    Effect.gen(function*() {
      const httpEffect = yield* HttpRunner.toHttpEffect.pipe(Effect.provide(RpcSerialization.layerJson))
      const handler = HttpEffect.toWebHandler(httpEffect)
      return RunnerEndpoint.of({ secret, handle: (request) => handler(request) })
    })
  )

/**
 * Sharding for the configured store: a single runner on PGlite, an HTTP runner on Postgres at
 * this process's HTTP port (0 when it serves no HTTP: a process alone on its database).
 */
export const ClusterLive = Layer.unwrap(Effect.gen(function*() {
  const config = yield* AppConfig
  const timings = yield* ClusterTimings
  if (databaseTarget(config)._tag === "pglite") {
    return SingleRunner.layer({ shardingConfig: { ...timings, entityMessagePollInterval: SINGLE_RUNNER_POLL }, runnerStorage: "memory" }).pipe(
      Layer.provide([ClusterSqlLive, Digest.layerWebCrypto]),
      Layer.orDie
    )
  }
  const secret = yield* readSecret
  const http = yield* Effect.serviceOption(HttpPort)
  const port = Option.match(http, { onNone: () => 0, onSome: (bound) => bound.port })
  if (port === null) {
    return yield* Effect.fail(
      new Config.ConfigError(new ConfigProvider.SourceError({ message: "PORT: cannot be off on Postgres (the cluster's runners call each other on it)" }))
    )
  }
  const address = RunnerAddress.make(advertisedHost(config), port)
  yield* Effect.logDebug(`cluster: runner ${address.host}:${address.port}`)
  return endpointLayer(secret).pipe(Layer.provideMerge(httpRunner(address, secret, timings)), Layer.provide(ClusterSqlLive))
}))

/** Constant-time comparison of the secret a caller sent. */
export const sameSecret = (sent: string | undefined, secret: string) => {
  if (sent === undefined || sent.length !== secret.length) return false
  let diff = 0
  for (let i = 0; i < secret.length; i++) diff |= sent.charCodeAt(i) ^ secret.charCodeAt(i)
  return diff === 0
}
