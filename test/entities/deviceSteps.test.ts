import { createActor, SimulatedClock } from "xstate"
import { describe, expect, it } from "vitest"
import { type DeviceEmitted, type DeviceEvent, deviceMachine } from "../../actors/deviceMachine.ts"
import { type DeviceSnapshot, makeDeviceSteps, persisted, type Raised } from "../../src/entities/deviceSteps.ts"

/**
 * The host steps each device's machine without an actor (`deviceSteps.ts`). Whatever happens, it
 * must end where an XState actor on a simulated clock ends: same state, context and emissions,
 * and its timer due exactly when the actor's fires.
 */

type Script = ReadonlyArray<{ readonly at: number; readonly event?: DeviceEvent }>

/** Runs `script` (events at times; an entry without event only moves the clock) through an actor. */
const throughActor = (offlineAfterMs: number | null, script: Script) => {
  const clock = new SimulatedClock()
  const actor = createActor(deviceMachine, { input: { deviceId: "dev_1", offlineAfterMs }, clock })
  const emitted: Array<DeviceEmitted> = []
  actor.on("*", (e) => emitted.push(e))
  actor.start()
  for (const { at, event } of script) {
    clock.set(at)
    if (event !== undefined) actor.send(event)
  }
  const snapshot = actor.getSnapshot()
  return { value: snapshot.value, context: snapshot.context, emitted }
}

/** The same through the steps, with the timer as the host keeps it: fired once the clock reaches its deadline. */
const throughSteps = (offlineAfterMs: number | null, script: Script) => {
  const steps = makeDeviceSteps()
  let snapshot: DeviceSnapshot = steps.initial({ deviceId: "dev_1", offlineAfterMs })
  let timer: { raised: Raised; deadline: number } | undefined
  const emitted: Array<DeviceEmitted> = []
  let now = 0
  const step = (event: DeviceEvent | Raised["event"]) => {
    const [next, effects] = steps.step(snapshot, event)
    snapshot = next
    for (const effect of effects) {
      if (effect.type === "emitted") emitted.push(effect.event)
      else if (effect.type === "raised") timer = { raised: effect.raised, deadline: now + effect.raised.delay }
      else if (timer?.raised.id === effect.id) timer = undefined
    }
  }
  for (const { at, event } of script) {
    while (timer !== undefined && timer.deadline <= at) {
      const due = timer
      timer = undefined
      now = due.deadline
      step(due.raised.event)
    }
    now = at
    if (event !== undefined) step(event)
  }
  return { value: snapshot.value, context: snapshot.context, emitted, snapshot, steps }
}

const scripts: ReadonlyArray<readonly [string, number | null, Script]> = [
  ["silent after one sign", 10_000, [{ at: 0, event: { type: "device.seen", at: 0 } }, { at: 30_000 }]],
  [
    "kept alive, then silent, then back",
    10_000,
    [
      { at: 0, event: { type: "device.seen", at: 0 } },
      { at: 9_000, event: { type: "device.seen", at: 9_000 } },
      { at: 18_999 },
      { at: 19_000 },
      { at: 25_000, event: { type: "device.seen", at: 25_000 } },
      { at: 40_000 }
    ]
  ],
  [
    "a sign told late counts from when it happened",
    10_000,
    [{ at: 0, event: { type: "device.seen", at: 0 } }, { at: 8_000, event: { type: "device.seen", at: 5_000, toldAt: 8_000 } }, { at: 20_000 }]
  ],
  [
    "unwatched, then watched, then not",
    null,
    [
      { at: 0, event: { type: "device.seen", at: 0 } },
      { at: 1_000, event: { type: "device.configured", offlineAfterMs: 5_000, at: 1_000 } },
      { at: 7_000 },
      { at: 8_000, event: { type: "device.seen", at: 8_000 } },
      { at: 9_000, event: { type: "device.configured", offlineAfterMs: null, at: 9_000 } },
      { at: 60_000 }
    ]
  ],
  [
    "anomaly baselines and verdicts",
    10_000,
    [0, 1, 2, 3, 4, 5].map((i) => ({
      at: i * 1_000,
      event: {
        type: "device.measured" as const,
        at: i * 1_000,
        eventName: "power",
        data: { watts: i === 5 ? 500 : 100 + i },
        rules: [{ id: "rul_a", eventName: "power", path: "watts", window: 4, zScore: 2 }]
      }
    }))
  ]
]

describe("device steps: a machine without an actor", () => {
  it.each(scripts)("ends as an actor on a simulated clock ends: %s", (_, offlineAfterMs, script) => {
    const actor = throughActor(offlineAfterMs, script)
    const steps = throughSteps(offlineAfterMs, script)
    expect({ value: steps.value, context: steps.context, emitted: steps.emitted }).toEqual(actor)
  })

  it("emits what the host turns into alerts: offline at the deadline, online when seen again", () => {
    const { emitted } = throughSteps(10_000, scripts[1][2])
    expect(emitted).toEqual([
      { type: "device.offline", deviceId: "dev_1", lastSeenAt: 9_000, at: 19_000, afterMs: 10_000 },
      { type: "device.online", deviceId: "dev_1", at: 25_000 },
      { type: "device.offline", deviceId: "dev_1", lastSeenAt: 25_000, at: 35_000, afterMs: 10_000 }
    ])
  })

  it("restores what it stores, and a restored online device restarts its timer when resumed", () => {
    const first = throughSteps(10_000, [{ at: 0, event: { type: "device.seen", at: 0 } }])
    const stored = JSON.parse(JSON.stringify(persisted(first.snapshot)))
    expect(stored).toMatchObject({ value: "online", context: { lastSeenAt: 0, offlineAfterMs: 10_000 } })
    const restored = first.steps.restore(stored)
    expect(restored.value).toBe("online")
    const [, effects] = first.steps.step(restored, { type: "device.resumed", at: 4_000 })
    expect(effects.filter((e) => e.type === "raised").map((e) => e.type === "raised" && e.raised.delay)).toEqual([6_000])
  })
})
