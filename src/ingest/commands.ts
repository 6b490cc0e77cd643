import { Effect } from "effect"
import type { SqlClient, SqlError } from "../store/Sql.ts"

/** A command as a run needs it. */
export interface CommandRef {
  readonly id: string
  readonly slug: string
  readonly deviceId: string
  readonly organisationId: string
}

interface Held extends CommandRef {
  readonly readAt: number
}

/** How long a command read from the store answers runs before it is read again. */
export const COMMAND_TTL_MS = 30_000
/** Commands held at most; beyond it the directory starts again empty. */
const COMMANDS_MAX = 100_000

const slugKey = (deviceId: string, slug: string) => `${deviceId}\u0000${slug}`

/**
 * The commands runs name, kept per process: a run then costs its insert only, not a lookup
 * first (bench:ingest's command case, issue 19 item 3). What can go stale, and what answers for it:
 * - a command renamed or deleted: the route that did it drops the organisation's commands here
 *   and, through `commands.changed` on the bus, in every other process; that notice is
 *   at-most-once, so an entry is also read again once older than COMMAND_TTL_MS;
 * - a command deleted (or its device, or its organisation) and the notice lost: the run's insert
 *   fails its foreign key, which is the same 404 the lookup gives, and the caller asks again with
 *   `fresh` (a command of the same slug may have been created since).
 * Only found commands are kept: one created elsewhere is found at its first run.
 */
export const makeCommandDirectory = (sql: SqlClient, now: () => number = Date.now) => {
  const byId = new Map<string, Held>()
  const bySlug = new Map<string, Held>()

  const keep = (row: { id: string; slug: string; device_id: string }, organisationId: string): CommandRef => {
    if (byId.size >= COMMANDS_MAX) clear()
    const held: Held = { id: row.id, slug: row.slug, deviceId: row.device_id, organisationId, readAt: now() }
    drop(held.id)
    byId.set(held.id, held)
    bySlug.set(slugKey(held.deviceId, held.slug), held)
    return held
  }

  const drop = (id: string) => {
    const held = byId.get(id)
    if (held === undefined) return
    byId.delete(id)
    const key = slugKey(held.deviceId, held.slug)
    if (bySlug.get(key) === held) bySlug.delete(key)
  }

  const clear = () => {
    byId.clear()
    bySlug.clear()
  }

  const usable = (held: Held | undefined, organisationId: string) =>
    held !== undefined && held.organisationId === organisationId && now() - held.readAt <= COMMAND_TTL_MS ? held : undefined

  return {
    /** The organisation's command with this id; undefined when it has none. `fresh`: ask the store. */
    byId: (organisationId: string, id: string, fresh = false): Effect.Effect<CommandRef | undefined, SqlError> => {
      const held = fresh ? undefined : usable(byId.get(id), organisationId)
      if (held !== undefined) return Effect.succeed(held)
      return Effect.map(
        sql.query<{ id: string; slug: string; device_id: string }>(
          "SELECT id, slug, device_id FROM commands WHERE id = $1 AND organisation_id = $2",
          [id, organisationId]
        ),
        ([row]) => {
          if (row !== undefined) return keep(row, organisationId)
          drop(id)
          return undefined
        }
      )
    },
    /** The command of this slug on the organisation's device; undefined when there is none. */
    bySlug: (organisationId: string, deviceId: string, slug: string, fresh = false): Effect.Effect<CommandRef | undefined, SqlError> => {
      const key = slugKey(deviceId, slug)
      const held = fresh ? undefined : usable(bySlug.get(key), organisationId)
      if (held !== undefined) return Effect.succeed(held)
      return Effect.map(
        sql.query<{ id: string; slug: string; device_id: string }>(
          "SELECT id, slug, device_id FROM commands WHERE device_id = $1 AND slug = $2 AND organisation_id = $3",
          [deviceId, slug, organisationId]
        ),
        ([row]) => {
          if (row !== undefined) return keep(row, organisationId)
          const stale = bySlug.get(key)
          if (stale !== undefined) drop(stale.id)
          return undefined
        }
      )
    },
    /** Forgets one command (its run found it gone). */
    drop,
    /** Forgets an organisation's commands (one was renamed or deleted, here or elsewhere). */
    forgetOrganisation: (organisationId: string) => {
      for (const held of [...byId.values()]) if (held.organisationId === organisationId) drop(held.id)
    },
    /** Forgets every command (devices were deleted). */
    clear
  }
}

export type CommandDirectory = ReturnType<typeof makeCommandDirectory>
