import { Effect } from "effect"
import { Entity } from "effect/cluster"
import { createActor } from "xstate"
import { isMember, liveOf, type Liveness, spaceMachine } from "../../actors/spaceMachine.ts"
import { Sql } from "../store/Sql.ts"
import { Space } from "./protocol.ts"
import { readDevice, readSeed } from "./spaceSeed.ts"

/**
 * The Space entity (entity id = space id), hosting its `spaceMachine`: the live counts of
 * `GET /spaces` (devices online and offline, open alerts), its timezone and its alert
 * recipients. One owner in the cluster; every process reads it with `GetSpace`.
 *
 * - Seeded from the store once, on activation (the liveness each device entity wrote to
 *   `device_actors`, the open alerts of the space's devices, the settings), and again on
 *   `Reseed`, which REST sends after it wrote the space's devices, settings or recipients.
 *   Nothing recounts it periodically.
 * - Then moved by `DeviceLiveness` (device entities write the liveness to the store before
 *   they send it, so a seed is never older than a message already applied) and `AlertChanged`
 *   (alert entities). Both are persisted and may come twice or late: the machine's state is a
 *   set, so they count once.
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

    /** Whether the device is a member, letting it join first when the store says it belongs here. */
    const member = (deviceId: string) =>
      Effect.gen(function*() {
        if (isMember(context(), deviceId)) return true
        const device = yield* Effect.orDie(readDevice(sql, deviceId))
        if (device === undefined || device.spaceId !== spaceId) return false
        actor.send({ type: "device.joined", deviceId, liveness: device.liveness, at: device.at })
        return true
      })

    const liveness = (deviceId: string, value: Liveness, at: number) =>
      Effect.map(member(deviceId), (is) => {
        if (is) actor.send({ type: "device.liveness", deviceId, liveness: value, at })
      })

    return Space.of({
      DeviceLiveness: ({ payload }) => liveness(payload.deviceId, payload.liveness, payload.at),
      AlertChanged: ({ payload }) =>
        payload.open
          ? Effect.map(member(payload.deviceId), (is) => {
            if (is) actor.send({ type: "alert.opened", alertId: payload.alertId, deviceId: payload.deviceId })
          })
          : Effect.sync(() => actor.send({ type: "alert.closed", alertId: payload.alertId })),
      Reseed: () =>
        Effect.map(Effect.orDie(readSeed(sql, spaceId)), (seed) => {
          actor.send({ type: "space.seeded", ...seed })
        }),
      GetSpace: () =>
        Effect.sync(() => {
          const { timezone, recipients } = context()
          return { ...liveOf(context()), timezone, recipients }
        })
    })
  })
)
