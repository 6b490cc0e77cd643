import type { Client, PublishPacket } from "aedes"
import type { SqlPersistence } from "./persistence.ts"

type Done = (error: Error | null) => void

/**
 * A QoS 2 PUBLISH sent again before its PUBREL is one message [MQTT-4.3.3-2]. Voltaic stores an
 * event as aedes authorizes its publish, before aedes's own check for a repeated packet id, so
 * that check is made here first: a repeat is passed on unstored (`pass`), and aedes answers it
 * with PUBREC again and publishes nothing (it holds the packet until PUBREL). One still being
 * stored on the connection is not in aedes's hands yet, and is counted here meanwhile.
 */
export const onceQos2 = (persistence: SqlPersistence, brokerId: string) => {
  /** Per connection, the QoS 2 publishes being stored now, by packet id. */
  const storing = new WeakMap<Client, Set<number>>()

  /** A QoS 2 publish with packet id `id`: `pass` for a repeat, `store` for a new one. */
  return (client: Client, id: number, packet: PublishPacket, done: Done, pass: (done: Done) => void, store: (done: Done) => void) => {
    let held = storing.get(client)
    if (held === undefined) storing.set(client, held = new Set())
    const mine = held
    if (mine.has(id)) return pass(done)
    mine.add(id)
    const settled = (error: Error | null) => {
      mine.delete(id)
      done(error)
    }
    // The store keeps incoming packets by client and packet id; the rest of the packet is not read.
    persistence.incomingGetPacket(client, { ...packet, brokerId, brokerCounter: 0 }).then(() => pass(settled), () => store(settled))
  }
}
