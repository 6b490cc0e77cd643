/**
 * Phase 3 of `npm run bench:cluster` (bench/cluster.ts): devices that fall silent at staggered
 * times around a kill -9, the kill, and how long until every shard of the killed process has an
 * owner again.
 */
import { call, type Device, type ServerAddress } from "./cluster-load.ts"
import { describeCounts, type Owners, SHARDS } from "./cluster-owners.ts"
import { sleep, sleepUntil } from "./harness.ts"

export interface SilentDevice {
  readonly device: Device
  /** When its last event is sent (epoch ms). */
  readonly lastAt: number
  /** The process it is sent to: its home before the kill, the survivor from a second before it. */
  via: string
  status: number
}

/**
 * Plans `count` devices whose offline deadlines (last event + `afterMs`) are spread evenly from
 * `beforeMs` before the kill to `afterKillMs` after it.
 */
export const planSilent = (devices: ReadonlyArray<Device>, killAt: number, afterMs: number, beforeMs: number, afterKillMs: number): Array<SilentDevice> =>
  devices.map((device, i) => {
    const deadline = killAt - beforeMs + (devices.length === 1 ? 0 : Math.round(i * (beforeMs + afterKillMs) / (devices.length - 1)))
    return { device, lastAt: deadline - afterMs, via: "", status: 0 }
  })

/** Sends each silent device's last event at its time (REST), to its home or, near and after the kill, to the survivor. */
export const runSilent = (plan: ReadonlyArray<SilentDevice>, servers: ReadonlyArray<ServerAddress>, survivor: ServerAddress, killAt: number) =>
  Promise.all(plan.map(async (silent, i) => {
    await sleepUntil(silent.lastAt)
    const target = silent.lastAt < killAt - 1_000 ? servers[i % servers.length] : survivor
    silent.via = target.name
    silent.status = (await call(target.httpUrl, silent.device.secretKey, "POST", "/events", { name: "last", data: i })).status
  }))

export interface Handover {
  /** Shards the killed process held just before the kill. */
  readonly victimShards: number
  /** Seconds from the kill until the survivor held the first / every one of them; undefined: not within the limit. */
  readonly firstTakenS: number | undefined
  readonly allOwnedS: number | undefined
  /** Seconds from the kill until its backend no longer held any shard lock. */
  readonly releasedS: number | undefined
  readonly ownersBefore: string
  readonly ownersAfter: string
}

/**
 * SIGKILLs `kill` at `killAt`, then polls the owners every 100 ms until each shard the victim
 * held is held by `survivor`, at most `limitMs`.
 */
export const killAndWatch = async (input: {
  readonly killAt: number
  readonly kill: () => void
  readonly victim: string
  readonly survivor: string
  readonly readOwners: () => Promise<Owners>
  readonly limitMs: number
  readonly log: (line: string) => void
}): Promise<Handover> => {
  await sleepUntil(input.killAt - 300)
  const before = await input.readOwners()
  const victimShards = [...before.byShard].filter(([, name]) => name === input.victim).map(([shard]) => shard)
  await sleepUntil(input.killAt)
  const killedAt = Date.now()
  input.kill()
  input.log(`killed ${input.victim} (SIGKILL); it held ${victimShards.length} of ${SHARDS} shards (${describeCounts(before.counts)})`)
  let firstTakenS: number | undefined
  let allOwnedS: number | undefined
  let releasedS: number | undefined
  let after = before
  while (Date.now() - killedAt < input.limitMs) {
    after = await input.readOwners()
    const seconds = (Date.now() - killedAt) / 1000
    const taken = victimShards.filter((shard) => after.byShard.get(shard) === input.survivor).length
    const stillHeld = [...after.byShard.values()].filter((name) => name !== input.survivor).length
    if (releasedS === undefined && stillHeld === 0) releasedS = seconds
    if (firstTakenS === undefined && taken > 0) firstTakenS = seconds
    if (taken === victimShards.length && after.byShard.size === SHARDS) {
      allOwnedS = seconds
      break
    }
    await sleep(100)
  }
  input.log(allOwnedS === undefined
    ? `the survivor did not own every shard within ${input.limitMs / 1000} s (${describeCounts(after.counts)})`
    : `every shard has an owner again after ${allOwnedS.toFixed(1)} s (${describeCounts(after.counts)})`)
  return {
    victimShards: victimShards.length,
    firstTakenS,
    allOwnedS,
    releasedS,
    ownersBefore: describeCounts(before.counts),
    ownersAfter: describeCounts(after.counts)
  }
}
