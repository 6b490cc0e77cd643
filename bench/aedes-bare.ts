/**
 * Peers for `bench/ingest.ts`: a bare aedes broker with its defaults (in-memory persistence),
 * no authentication and no storage, on node:net. Run as its own process; prints
 * `bare aedes listening on <host>:<port>` once ready.
 *
 * With `DURABLE_DATABASE_URL` (a Postgres database) or `DURABLE_PGLITE_DIR` (a PGlite data
 * directory on disk, opened as Voltaic opens it, on this process's thread) it is the least a
 * broker can do that, like Voltaic, acknowledges and forwards a publish only once it is committed:
 * each publish becomes a row of one table (topic, payload, client; an identity key), written by
 * group commit on one connection — a batch goes at the end of the event loop's turn in which the
 * store was found idle, and what arrives while it commits waits and goes together in the next —
 * and aedes is let go on with the publish (PUBACK, forwarding) only after its batch committed
 * (`authorizePublish`, which aedes runs before both). No authentication, no device registry, no
 * parsing of the payload. It prints `durable aedes listening on <host>:<port>`. The stores'
 * modules are loaded only for a durable peer: the bare broker's memory is measured.
 *
 * With `PEER_HTTP=1` it also answers `POST /v1/commands/run` on node:http (bench:ingest's command
 * case sent over REST): the body's `slug`, `device.id` and `data` become a publish on
 * `devices/{id}/commands/{slug}/run`, forwarded by the broker and answered with 200 — on a durable
 * peer only once its row (client `http`) committed in the same group commit as the publishes.
 * No authentication, no command registry. The line it prints then ends `, http on <host>:<port>`.
 */
import { Aedes, type AedesOptions } from "aedes"
import { type AddressInfo, createServer } from "node:net"

const host = process.env.HOST ?? "127.0.0.1"
const databaseUrl = process.env.DURABLE_DATABASE_URL
const pgliteDir = process.env.DURABLE_PGLITE_DIR
/** Publishes one statement writes at most (Voltaic's writer: 2,000). */
const MAX_BATCH = 2_000

interface Waiting {
  readonly clientId: string
  readonly topic: string
  readonly payload: string
  readonly done: (error?: Error | null) => void
}

type AuthorizePublish = NonNullable<AedesOptions["authorizePublish"]>

/** One store statement with parameters (the batch's three arrays, as Postgres text arrays). */
interface Store {
  readonly run: (statement: string, params?: ReadonlyArray<ReadonlyArray<string>>) => Promise<void>
  readonly close: () => Promise<void>
}

const postgresStore = async (url: string): Promise<Store> => {
  const { default: postgres } = await import("postgres")
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  return {
    run: async (statement, params = []) => void await sql.unsafe(statement, params.map((p) => [...p])),
    close: () => sql.end({ timeout: 2 })
  }
}

/** Text array literal: PGlite's parameters are sent as text. */
const textArray = (items: ReadonlyArray<string>) => `{${items.map((i) => `"${i.replaceAll("\\", "\\\\").replaceAll("\"", "\\\"")}"`).join(",")}}`

const pgliteStore = async (dir: string): Promise<Store> => {
  const { PGlite } = await import("@electric-sql/pglite")
  const { durableDisk } = await import("../src/store/pgliteDisk.ts")
  const db = await PGlite.create(durableDisk(dir))
  return {
    run: async (statement, params = []) => void await db.query(statement, params.map(textArray)),
    close: () => db.close()
  }
}

/** A row written by the next group commit; `done` once it committed (or failed). */
type Commit = (clientId: string, topic: string, payload: string, done: (error?: Error | null) => void) => void

const groupCommit = async (sql: Store): Promise<{ readonly authorize: AuthorizePublish; readonly commit: Commit; readonly close: () => Promise<void> }> => {
  await sql.run(`CREATE TABLE IF NOT EXISTS peer_messages (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client_id text NOT NULL,
    topic text NOT NULL,
    payload text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
  )`)
  const queue: Array<Waiting> = []
  let writing = false
  const write = async () => {
    while (queue.length > 0) {
      const batch = queue.splice(0, MAX_BATCH)
      let failure: Error | null = null
      try {
        await sql.run(
          "INSERT INTO peer_messages (client_id, topic, payload) SELECT * FROM unnest($1::text[], $2::text[], $3::text[])",
          [batch.map((w) => w.clientId), batch.map((w) => w.topic), batch.map((w) => w.payload)]
        )
      } catch (error) {
        failure = error instanceof Error ? error : new Error(String(error))
      }
      for (const w of batch) w.done(failure)
    }
    writing = false
  }
  const commit: Commit = (clientId, topic, payload, done) => {
    queue.push({ clientId, topic, payload, done })
    if (writing) return
    // As Voltaic's writer: the batch starts once this turn of the event loop is over, so the
    // rest of the socket read and other connections' publishes join it (PGlite, on this
    // thread, would otherwise commit each first publish alone, synchronously).
    writing = true
    setImmediate(() => void write())
  }
  return {
    authorize: (client, packet, done) => commit(client?.id ?? "", packet.topic, packet.payload.toString(), done),
    commit,
    close: sql.close
  }
}

const durable = databaseUrl !== undefined && databaseUrl !== ""
  ? await groupCommit(await postgresStore(databaseUrl))
  : pgliteDir !== undefined && pgliteDir !== ""
  ? await groupCommit(await pgliteStore(pgliteDir))
  : undefined
// Durable: a commit releases up to a batch of publishes at once; behind mqemitter's in-flight
// window they would be drained recursively and overflow the stack (mcollina/mqemitter#204), so
// the window is off, as in Voltaic's broker (src/adapters/mqtt/MqttBroker.ts).
const broker = await Aedes.createBroker(durable === undefined ? {} : { authorizePublish: durable.authorize, concurrency: 0 })
// Without a listener the EventEmitter would throw; closed connections are expected here.
broker.on("clientError", () => {})
broker.on("connectionError", () => {})
const server = createServer((socket) => broker.handle(socket))

/** `PEER_HTTP`: a command run over REST becomes a publish on its run topic (after its commit, when durable). */
const httpPeer = async () => {
  const { createServer: createHttpServer } = await import("node:http")
  const http = createHttpServer((req, res) => {
    const answer = (status: number, body: string) => {
      res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
      res.end(body)
    }
    if (req.method !== "POST" || req.url !== "/v1/commands/run") return void answer(404, "{\"error\":\"not found\"}")
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      let input: { readonly slug?: unknown; readonly device?: { readonly id?: unknown }; readonly data?: unknown }
      try {
        input = JSON.parse(Buffer.concat(chunks).toString("utf8"))
      } catch {
        return answer(400, "{\"error\":\"body: must be valid JSON\"}")
      }
      if (typeof input.slug !== "string" || typeof input.device?.id !== "string") return answer(400, "{\"error\":\"slug and device.id are required\"}")
      const topic = `devices/${input.device.id}/commands/${input.slug}/run`
      const run = JSON.stringify({ slug: input.slug, data: input.data ?? null, device: { id: input.device.id }, timestamp: Date.now() })
      const forward = (error?: Error | null) => {
        if (error) return answer(503, JSON.stringify({ error: error.message }))
        broker.publish({ cmd: "publish", topic, payload: Buffer.from(run), qos: 1, retain: false, dup: false, messageId: 0 }, () => answer(200, run))
      }
      if (durable === undefined) forward()
      else durable.commit("http", topic, run, forward)
    })
  })
  await new Promise<void>((resolve) => http.listen(0, host, resolve))
  return http
}
const http = process.env.PEER_HTTP === "1" ? await httpPeer() : undefined

server.listen(0, host, () => {
  const { port } = server.address() as AddressInfo
  const httpPort = http === undefined ? undefined : (http.address() as AddressInfo).port
  console.log(`${durable === undefined ? "bare" : "durable"} aedes listening on ${host}:${port}${httpPort === undefined ? "" : `, http on ${host}:${httpPort}`}`)
})

const stop = () => {
  http?.close()
  http?.closeAllConnections()
  server.close()
  broker.close(() => void (durable?.close() ?? Promise.resolve()).finally(() => process.exit(0)))
  setTimeout(() => process.exit(0), 3_000).unref()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
