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

const groupCommit = async (sql: Store): Promise<{ readonly authorize: AuthorizePublish; readonly close: () => Promise<void> }> => {
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
  return {
    authorize: (client, packet, done) => {
      queue.push({ clientId: client?.id ?? "", topic: packet.topic, payload: packet.payload.toString(), done })
      if (writing) return
      // As Voltaic's writer: the batch starts once this turn of the event loop is over, so the
      // rest of the socket read and other connections' publishes join it (PGlite, on this
      // thread, would otherwise commit each first publish alone, synchronously).
      writing = true
      setImmediate(() => void write())
    },
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
server.listen(0, host, () => {
  const { port } = server.address() as AddressInfo
  console.log(`${durable === undefined ? "bare" : "durable"} aedes listening on ${host}:${port}`)
})

const stop = () => {
  server.close()
  broker.close(() => void (durable?.close() ?? Promise.resolve()).finally(() => process.exit(0)))
  setTimeout(() => process.exit(0), 3_000).unref()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
