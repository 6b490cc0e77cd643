import type { DeviceEmitted } from "../../actors/deviceMachine.ts"
import { evaluateThreshold } from "../../actors/rules.ts"
import type { AlertIntent as AlertMessage, SeenEvent } from "./protocol.ts"
import { applies, offlineLimitMs, type Place, type Rule } from "./rules.ts"

/**
 * What a device's rules make of what its machine emitted and of the events it sent: alerts to
 * raise or clear, each keyed by what caused it (the deadline, the event), so that the same step
 * run again (its owner died before it was done) sends messages the cluster already stores.
 */
export type AlertIntent =
  | {
    readonly _tag: "raise"
    readonly rule: Rule
    readonly deviceId: string
    readonly key: string
    readonly at: number
    readonly note: string
    readonly event: typeof SeenEvent.Type | null
  }
  | { readonly _tag: "clear"; readonly rule: Rule; readonly deviceId: string; readonly key: string; readonly at: number }

/** The intents as the AlertBucket entity takes them (`Apply`). */
export const toMessages = (intents: ReadonlyArray<AlertIntent>): Array<AlertMessage> =>
  intents.map((a) => ({
    kind: a._tag,
    ruleId: a.rule.id,
    deviceId: a.deviceId,
    organisationId: a.rule.organisationId,
    at: a.at,
    note: a._tag === "raise" ? a.note : "",
    event: a._tag === "raise" ? a.event : null,
    autoResolve: a.rule.autoResolve
  }))

/** A device as its alerts see it: where it is, and the threshold and anomaly rules it may have an open alert for. */
export interface AlertingDevice {
  readonly id: string
  readonly place: Place
  readonly raised: Array<string>
}

export const alertIntents = (push: (intent: AlertIntent) => void) => {
  const raise = (device: AlertingDevice, rule: Rule, key: string, at: number, note: string, event: typeof SeenEvent.Type | null) => {
    if (rule.type !== "offline" && !device.raised.includes(rule.id)) device.raised.push(rule.id)
    push({ _tag: "raise", rule, deviceId: device.id, key, at, note, event })
  }

  /** A condition cleared: told only to an alert that may be open and that resolves itself. */
  const clear = (device: AlertingDevice, rule: Rule, key: string, at: number) => {
    if (!rule.autoResolve) return
    if (rule.type !== "offline") {
      const i = device.raised.indexOf(rule.id)
      if (i < 0) return
      device.raised.splice(i, 1)
    }
    push({ _tag: "clear", rule, deviceId: device.id, key, at })
  }

  return {
    /**
     * The machine went offline at a limit (the offline rules of that limit that apply), or online
     * (every offline rule that applies), or judged a value (its anomaly rule).
     */
    emitted: (device: AlertingDevice, rules: ReadonlyArray<Rule>, e: DeviceEmitted, event: typeof SeenEvent.Type | undefined) => {
      if (e.type === "device.anomaly") {
        const rule = rules.find((r) => r.id === e.ruleId)
        const cause = event?.id ?? String(e.at)
        if (rule === undefined) return
        if (e.verdict === "breach") {
          // The event judged, as a threshold alert carries its own.
          raise(device, rule, `anomaly:${cause}`, e.at, `value ${e.z.toFixed(1)} standard deviations from its baseline`, event ?? null)
        } else clear(device, rule, `clear:${cause}`, e.at)
        return
      }
      for (const rule of rules) {
        if (rule.type !== "offline" || !applies(rule, device.place)) continue
        if (e.type === "device.offline") {
          // Each offline rule at its own limit: the machine tells each limit as it passes.
          if (offlineLimitMs(rule) !== e.afterMs) continue
          raise(device, rule, `offline@${e.at}`, e.at, `no sign of life since ${new Date(e.lastSeenAt ?? 0).toISOString()}`, null)
        } else clear(device, rule, `online@${e.at}`, e.at)
      }
    },
    /** An event judged by the threshold rules that watch it (and apply to the device). */
    thresholds: (device: AlertingDevice, rules: ReadonlyArray<Rule>, event: typeof SeenEvent.Type, at: number) => {
      for (const rule of rules) {
        const verdict = evaluateThreshold(rule.config as { eventName: string }, event.name, event.data)
        if (verdict === "breach") raise(device, rule, `event:${event.id}`, at, `${event.name} out of range`, event)
        else if (verdict === "clear") clear(device, rule, `clear:${event.id}`, at)
      }
    }
  }
}
