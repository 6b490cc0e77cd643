import type { Client } from "aedes"
import { Effect, type Scope } from "effect"
import type { Bus } from "../../bus/Bus.ts"
import { MAX_QUEUED_PER_CLIENT } from "./persistence.ts"

interface Holder {
  readonly principal: string
  readonly client: Client
  /** When it was admitted here (epoch ms): what its notice said. */
  readonly since: number
}

/**
 * Whether a connection admitted on `origin` at `at` is newer than one admitted on `brokerId` at
 * `since`: by time, then by broker id, so that two processes agree on which of two connections
 * of one client id admitted in the same millisecond survives.
 */
const admittedLater = (at: number, origin: string, since: number, brokerId: string) =>
  at > since || (at === since && origin > brokerId)

export interface ClientIds {
  /** Whether a live connection here holds `clientId` for another principal (which a CONNECT may not take over). */
  heldByOther(clientId: string, principal: string): boolean
  /** `client` now holds its id, here and (after a notice on the bus) on every process. */
  hold(client: Client, principal: string): void
  /** A queue at `MAX_QUEUED_PER_CLIENT` (`SqlPersistence`): says so once, and closes a client connected here. */
  full(clientId: string): void
}

/**
 * Who holds a client id. Within a process aedes closes the older connection of a client id
 * [MQTT-3.1.4-2]; across processes a CONNECT announces itself on the bus and a process holding
 * the id for the same principal closes its connection, so a session moving to another process
 * is served there only. A connection of another principal is left alone: a stored session is
 * checked against its principal in the store (`SqlPersistence.claim`), and clean sessions
 * share nothing across processes. A lost notice leaves the old connection until its
 * keep-alive ends it. A notice that arrives after a newer connection of its id was admitted
 * here (NATS took longer to bring it than the client took to reconnect here) is stale, and
 * leaves that connection alone: each notice says when its connection was admitted, so the
 * newest connection wins wherever its notice lands. The processes' clocks order them: clocks
 * apart by more than the time a client takes to reconnect could close the newer instead.
 */
export const makeClientIds = (deps: {
  readonly bus: Bus["Service"]
  readonly brokerId: string
  readonly run: (effect: Effect.Effect<void>) => unknown
  readonly peer: (client: Client) => string
}): Effect.Effect<ClientIds, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { bus, brokerId, run, peer } = deps
    const holders = new Map<string, Holder>()
    /** Client ids whose full queue was already logged, until they connect again. */
    const fullQueues = new Set<string>()
    const live = (clientId: string) => {
      const holder = holders.get(clientId)
      return holder === undefined || holder.client.closed ? undefined : holder
    }

    yield* bus.onControl((message) => {
      if (message.type !== "mqtt.connected" || message.origin === brokerId) return
      const holder = live(message.clientId)
      if (holder === undefined || holder.principal !== message.principal) return
      if (message.at !== undefined && !admittedLater(message.at, message.origin, holder.since, brokerId)) return
      run(Effect.logInfo(`mqtt ${peer(holder.client)} closed: its client id connected to another process`))
      holder.client.close()
    })

    return {
      heldByOther: (clientId, principal) => {
        const holder = live(clientId)
        return holder !== undefined && holder.principal !== principal
      },
      hold: (client, principal) => {
        const since = Date.now()
        holders.set(client.id, { principal, client, since })
        fullQueues.delete(client.id)
        client.conn.once("close", () => {
          if (holders.get(client.id)?.client === client) holders.delete(client.id)
        })
        run(bus.control({ type: "mqtt.connected", clientId: client.id, principal, origin: brokerId, at: since }))
      },
      full: (clientId) => {
        const client = live(clientId)?.client
        if (!fullQueues.has(clientId)) {
          fullQueues.add(clientId)
          run(Effect.logWarning(
            client !== undefined
              // Connected, yet this many deliveries are unacknowledged: it reads but does not answer.
              ? `mqtt ${peer(client)} closed: ${MAX_QUEUED_PER_CLIENT} deliveries left unacknowledged`
              : `mqtt session ${clientId}: ${MAX_QUEUED_PER_CLIENT} deliveries queued while it is away; later ones are not kept for it`
          ))
        }
        client?.close()
      }
    }
  })
