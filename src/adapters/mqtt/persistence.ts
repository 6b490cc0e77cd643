import type { Client } from "aedes"
import type { AedesPacket } from "aedes-packet"
import MemoryPersistence from "aedes-persistence/asyncPersistence.js"

/** Deliveries one client id may have waiting (offline, or sent and not yet acknowledged). */
export const MAX_QUEUED_PER_CLIENT = 1_000

/**
 * aedes's in-memory session store with each client id's outgoing queue bounded: a persistent
 * session (clean: false) that stays away, or a client that reads but never acknowledges,
 * otherwise holds every QoS 1 delivery for its subscriptions in memory without end. A delivery
 * beyond the bound is not queued for that client id: `onFull` hears of it (the broker logs the
 * first one and closes a connected client, whose unacknowledged window is full); the queue
 * fills again as acknowledgements or the next connection's replay drain it.
 */
export class BoundedMemoryPersistence extends MemoryPersistence {
  readonly #queued = new Map<string, number>()

  constructor(
    readonly limit: number,
    private readonly onFull: (clientId: string) => void
  ) {
    super()
  }

  /** How many deliveries wait for `clientId`, as counted here. */
  queued(clientId: string): number {
    return this.#queued.get(clientId) ?? 0
  }

  #admit(clientId: string): boolean {
    const queued = this.#queued.get(clientId) ?? 0
    if (queued >= this.limit) {
      this.onFull(clientId)
      return false
    }
    this.#queued.set(clientId, queued + 1)
    return true
  }

  override async outgoingEnqueue(sub: { clientId: string }, packet: AedesPacket): Promise<void> {
    if (this.#admit(sub.clientId)) await super.outgoingEnqueue(sub, packet)
  }

  override async outgoingEnqueueCombi(subs: Array<{ clientId: string }>, packet: AedesPacket): Promise<void> {
    const admitted = subs.filter((sub) => this.#admit(sub.clientId))
    if (admitted.length > 0) await super.outgoingEnqueueCombi(admitted, packet)
  }

  override async outgoingClearMessageId(client: Client, packet: AedesPacket): Promise<AedesPacket> {
    const removed: AedesPacket | undefined = await super.outgoingClearMessageId(client, packet)
    if (removed !== undefined) {
      const left = (this.#queued.get(client.id) ?? 1) - 1
      if (left > 0) this.#queued.set(client.id, left)
      else this.#queued.delete(client.id)
    }
    // The base answers `undefined` for a packet it does not hold, whatever its declaration says.
    return removed as AedesPacket
  }
}
