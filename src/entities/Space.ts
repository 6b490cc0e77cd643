import { Effect } from "effect"
import { Entity } from "effect/cluster"
import { createActor } from "xstate"
import { isMember, liveOf, spaceMachine } from "../../actors/spaceMachine.ts"
import { Sql } from "../store/Sql.ts"
import { Space } from "./protocol.ts"
import { ResidentSpaces } from "./residents.ts"
import { readDevices, readSeed } from "./spaceSeed.ts"

/**
 * The Space entity (entity id = space id), hosting its `spaceMachine`: the live counts of
 * `GET /spaces` (devices online and offline, open alerts), its timezone and its alert
 * recipients. One owner in the cluster; every process reads it with `GetSpace`.
 *
 * - Seeded from the store once, on activation (the liveness each device entity wrote to
 *   `device_actors`, the open alerts of the space's devices, the settings), and again on
 *   `Reseed`, which REST sends after it wrote the space's devices, settings or recipients.
 *   Nothing recounts it periodically.
 * - Then moved by `Changes`, one message per step of a device bucket (devices' liveness) or of
 *   an alert bucket (alerts open or closed). They may come twice or late: the machine's state
 *   is a set per device (a later `at` wins) and per alert, so they count once.
 * - A change about a device it does not hold (created after the seed, or moved here) is checked
 *   against the store: the device joins if it belongs here now, else the change is dropped (it
 *   was about the space the device left).
 */
export const SpaceLive = Space.toLayer(
  Effect.gen(function*() {
    const spaceId = (yield* Entity.CurrentAddress).entityId
    const sql = yield* Sql
    const seeded = yield* Effect.orDie(readSeed(sql, spaceId))
    const actor = createActor(spaceMachine, { input: { spaceId, ...seeded } }).start()
    yield* Effect.addFinalizer(() => Effect.sync(() => actor.stop()))

    const context = () => actor.getSnapshot().context

    /** Lets the devices among these that the store says belong here, and the space does not hold yet, join (one read for all). */
    const join = Effect.fnUntraced(function*(deviceIds: ReadonlyArray<string>) {
      const unknown = [...new Set(deviceIds.filter((id) => !isMember(context(), id)))]
      if (unknown.length > 0) {
        const read = yield* Effect.orDie(readDevices(sql, unknown))
        for (const [deviceId, device] of read) {
          if (device.spaceId === spaceId) actor.send({ type: "device.joined", deviceId, liveness: device.liveness, at: device.at })
        }
      }
    })

    const read = () => {
      const { timezone, recipients } = context()
      return { ...liveOf(context()), timezone, recipients }
    }
    // Read in memory by this process's REST (`presentSpaces`), as `GetSpace` answers.
    const residents = yield* ResidentSpaces
    residents.add(spaceId, read)
    yield* Effect.addFinalizer(() => Effect.sync(() => residents.remove(spaceId)))

    return Space.of({
      Changes: ({ payload }) =>
        Effect.gen(function*() {
          const opened = payload.alerts.filter((a) => a.open)
          yield* join([...payload.devices.map((d) => d.deviceId), ...opened.map((a) => a.deviceId)])
          // One step of the machine for the whole message (a burst brings thousands).
          actor.send({ type: "changes", devices: payload.devices, alerts: payload.alerts })
        }),
      Reseed: () =>
        Effect.map(Effect.orDie(readSeed(sql, spaceId)), (seed) => {
          actor.send({ type: "space.seeded", ...seed })
        }),
      GetSpace: () => Effect.sync(read)
    })
  })
)
