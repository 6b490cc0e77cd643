import { Effect } from "effect"
import { hashSecret } from "../auth/secrets.ts"
import type { Principal } from "../auth/Principal.ts"
import { Forbidden, InvalidInput, NotFound } from "../domain/errors.ts"
import { newId, newSecret } from "../domain/ids.ts"
import type { SqlClient } from "../store/Sql.ts"
import type { IngestError } from "./Ingest.ts"
import type { DeviceRef } from "./schemas.ts"

/** SQLSTATE foreign_key_violation: the row's device was deleted after it was resolved. */
const FOREIGN_KEY_VIOLATION = "23503"

/**
 * A write whose device (or command) was deleted after it was resolved, by another request or
 * process, is the client's unknown id (404 / refused publish / 4.04), not a failure of the store.
 */
export const gone = (resource: string, id: string) => <E extends { readonly _tag: string }>(e: E): E | NotFound =>
  e._tag === "SqlError" && "code" in e && e.code === FOREIGN_KEY_VIOLATION ? new NotFound({ resource, id }) : e

/** Device ids seen recently → their organisation: most traffic names the same devices again. */
const OWNER_CACHE_MAX = 100_000

/**
 * Which device an envelope is for, checked against the sender's organisation, with the owners
 * of recently named devices cached (the common publish then needs no store at all).
 */
export const makeDeviceResolver = (sql: SqlClient, created: (organisationId: string) => Effect.Effect<void>) => {
  const owners = new Map<string, string>()

  const remember = (deviceId: string, organisationId: string) => {
    if (owners.size >= OWNER_CACHE_MAX) owners.clear()
    owners.set(deviceId, organisationId)
  }

  /** The customId of a device of the organisation (null when it has none); 404 otherwise. */
  const customIdOf = (organisationId: string, id: string) =>
    sql.query<{ custom_id: string | null }>("SELECT custom_id FROM devices WHERE id = $1 AND organisation_id = $2", [id, organisationId]).pipe(
      Effect.flatMap(([row]) => row === undefined ? Effect.fail(new NotFound({ resource: "device", id })) : Effect.succeed(row.custom_id))
    )

  /**
   * Which device an envelope is for, checked against the sender's organisation. A device key
   * acts as itself and may name only itself. `create`: a new `customId` creates its device
   * (events and locations); otherwise it is 404 (a command run needs a device with commands).
   */
  const resolveDevice = (
    principal: Principal,
    ref: DeviceRef | undefined,
    create = true
  ): Effect.Effect<string, IngestError> => {
    if (principal.kind === "device") {
      if (ref?.id !== undefined && ref.id !== principal.id) {
        return Effect.fail(new Forbidden({ message: "a device key may only act as its own device" }))
      }
      if (ref?.customId === undefined) return Effect.succeed(principal.id)
      const customId = ref.customId
      return customIdOf(principal.organisationId, principal.id).pipe(
        Effect.flatMap((own) =>
          own === customId
            ? Effect.succeed(principal.id)
            : Effect.fail(new Forbidden({ message: "a device key may only act as its own device" }))
        )
      )
    }
    if (principal.kind === "app" && principal.readOnly) {
      return Effect.fail(new Forbidden({ message: "this application key is read-only" }))
    }
    if (principal.kind === "management") {
      return Effect.fail(new Forbidden({ message: "a management token serves the user-management interface only" }))
    }
    if (ref?.id !== undefined && ref.customId !== undefined) {
      const { id, customId } = ref
      return customIdOf(principal.organisationId, id).pipe(
        Effect.flatMap((own) =>
          own === customId ? Effect.succeed(id) : Effect.fail(
            new InvalidInput({
              field: "device.customId",
              message: `device.customId: device ${id} has customId ${JSON.stringify(own)}, not ${JSON.stringify(customId)}`
            })
          )
        )
      )
    }
    if (ref?.id !== undefined) {
      const id = ref.id
      if (owners.get(id) === principal.organisationId) return Effect.succeed(id)
      return sql.query<{ organisation_id: string }>("SELECT organisation_id FROM devices WHERE id = $1", [id]).pipe(
        Effect.flatMap(([row]) => {
          if (row === undefined || row.organisation_id !== principal.organisationId) {
            return Effect.fail(new NotFound({ resource: "device", id }))
          }
          remember(id, principal.organisationId)
          return Effect.succeed(id)
        })
      )
    }
    if (ref?.customId !== undefined) {
      return create ? deviceByCustomId(principal.organisationId, ref.customId) : existingByCustomId(principal.organisationId, ref.customId)
    }
    return Effect.fail(new InvalidInput({ field: "device", message: "device: name the device with device.id or device.customId" }))
  }

  /** `device.customId` finds the device, creating it on first use (API-DECISIONS "Authentication"). */
  const deviceByCustomId = Effect.fnUntraced(function*(organisationId: string, customId: string) {
    const now = Date.now()
    // xmax is 0 on a row this statement inserted, and the locking transaction's id on one it updated.
    const rows = yield* sql.query<{ id: string; inserted: boolean }>(
      `INSERT INTO devices (id, organisation_id, secret_hash, name, custom_id, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $4, $5, $5)
       ON CONFLICT (organisation_id, custom_id) WHERE custom_id IS NOT NULL DO UPDATE SET custom_id = EXCLUDED.custom_id
       RETURNING id, xmax = 0 AS inserted`,
      [newId("dev", now), organisationId, hashSecret(newSecret("d_sk")), customId, now]
    )
    if (rows[0].inserted) yield* created(organisationId)
    remember(rows[0].id, organisationId)
    return rows[0].id
  })

  const existingByCustomId = (organisationId: string, customId: string) =>
    sql.query<{ id: string }>("SELECT id FROM devices WHERE organisation_id = $1 AND custom_id = $2", [organisationId, customId]).pipe(
      Effect.flatMap(([row]) =>
        row === undefined ? Effect.fail(new NotFound({ resource: "device with customId", id: customId })) : Effect.succeed(row.id)
      )
    )

  /** The device an envelope is for when that needs neither the store nor a refusal. */
  const knownDevice = (principal: Principal, ref: DeviceRef | undefined): string | undefined => {
    if (ref?.customId !== undefined) return undefined
    if (principal.kind === "device") return ref?.id === undefined || ref.id === principal.id ? principal.id : undefined
    if (principal.kind !== "app" || principal.readOnly || ref?.id === undefined) return undefined
    return owners.get(ref.id) === principal.organisationId ? ref.id : undefined
  }

  return { resolveDevice, knownDevice, forget: () => owners.clear() }
}
