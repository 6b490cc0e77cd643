import { Data, Effect } from "effect"
import type { Principal } from "../auth/Principal.ts"
import type { BusService } from "../bus/Bus.ts"
import { commandRunTopic } from "../bus/topics.ts"
import { Forbidden, InvalidInput, NotFound, type PayloadTooLarge } from "../domain/errors.ts"
import { newId } from "../domain/ids.ts"
import type { SqlClient } from "../store/Sql.ts"
import type { WriterService } from "../store/Writer.ts"
import { makeCommandDirectory } from "./commands.ts"
import { gone } from "./devices.ts"
import type { CommandRunJson, Envelope, IngestError, IngestService } from "./Ingest.ts"
import type { CommandRunInput, DeviceRef } from "./schemas.ts"

/** A run's command, held by this process, was gone from the store: it is looked up again once. */
class StaleCommand extends Data.TaggedError("StaleCommand")<{ readonly notFound: NotFound }> {}

/**
 * Command runs (`Ingest.runCommand`): the command found in this process's directory
 * (`commands.ts`), the run stored, then delivered on `devices/{id}/commands/{slug}/run`.
 */
export const makeCommandRuns = Effect.fnUntraced(function*(deps: {
  readonly sql: SqlClient
  readonly writer: WriterService
  readonly bus: BusService
  readonly resolveDevice: (principal: Principal, ref: DeviceRef | undefined, create?: boolean) => Effect.Effect<string, IngestError>
  readonly dataText: (data: unknown) => Effect.Effect<string | null, PayloadTooLarge>
}) {
  const { sql, writer, bus, resolveDevice, dataText } = deps
  const commands = makeCommandDirectory(sql)
  yield* bus.onControl((message) => {
    if (message.type === "commands.changed") commands.forgetOrganisation(message.organisationId)
  })

  /**
   * The command a run names, from the directory (`fresh`: from the store). The id decides;
   * a slug or device given with it must agree rather than be ignored.
   */
  const commandOf = Effect.fnUntraced(function*(principal: Principal, envelope: Envelope<CommandRunInput>, fresh: boolean) {
    const input = envelope.payload
    if (input.id !== undefined) {
      const command = yield* commands.byId(principal.organisationId, input.id, fresh)
      if (command === undefined) return yield* new NotFound({ resource: "command", id: input.id })
      if (input.slug !== undefined && input.slug !== command.slug) {
        return yield* new InvalidInput({ field: "slug", message: `slug: command ${command.id} has slug ${command.slug}, not ${input.slug}` })
      }
      if (envelope.device !== undefined && (envelope.device.id !== undefined || envelope.device.customId !== undefined)) {
        const named = yield* resolveDevice(principal, envelope.device, false)
        if (named !== command.deviceId) {
          return yield* new InvalidInput({ field: "device", message: `device: command ${command.id} belongs to device ${command.deviceId}, not ${named}` })
        }
      }
      return command
    }
    if (input.slug === undefined) {
      return yield* new InvalidInput({ field: "slug", message: "slug: is required (or the command id)" })
    }
    const deviceId = yield* resolveDevice(principal, envelope.device, false)
    const command = yield* commands.bySlug(principal.organisationId, deviceId, input.slug, fresh)
    if (command === undefined) return yield* new NotFound({ resource: "command", id: `${input.slug} of device ${deviceId}` })
    return command
  })

  const runOnce = Effect.fnUntraced(function*(principal: Principal, envelope: Envelope<CommandRunInput>, fresh: boolean) {
    const command = yield* commandOf(principal, envelope, fresh)
    if (principal.kind === "app" && principal.readOnly) return yield* new Forbidden({ message: "this application key is read-only" })
    const input = envelope.payload
    const data = yield* dataText(input.data)
    const now = Date.now()
    const run: CommandRunJson = {
      id: newId("cmd", now),
      slug: command.slug,
      data: input.data ?? null,
      device: { id: command.deviceId },
      timestamp: now
    }
    // Stored first, like every acknowledged write: a retried run (back-pressure) is then
    // never delivered twice. Group commit keeps this to a few milliseconds.
    yield* Effect.mapError(writer.write({
      _tag: "run",
      row: {
        id: run.id,
        organisationId: principal.organisationId,
        commandId: command.id,
        deviceId: command.deviceId,
        data,
        timestamp: now,
        protocol: envelope.protocol
      }
    }), (e) => {
      const mapped = gone("command", command.id)(e)
      // A held command that is gone: it may have been deleted (and one of the same slug made) elsewhere.
      if (mapped._tag !== "NotFound" || fresh) return mapped
      commands.drop(command.id)
      return new StaleCommand({ notFound: mapped })
    })
    yield* bus.deliver({
      organisationId: principal.organisationId,
      deviceId: command.deviceId,
      topic: commandRunTopic(command.deviceId, command.slug),
      payload: JSON.stringify(run)
    })
    return { ...run, command: { id: command.id } }
  })

  const runCommand: IngestService["runCommand"] = (envelope) => {
    const principal = envelope.principal
    if (principal.kind === "device") {
      return Effect.fail(new Forbidden({ message: "a device key receives commands; it cannot run them" }))
    }
    if (principal.kind === "management") {
      return Effect.fail(new Forbidden({ message: "a management token serves the user-management interface only" }))
    }
    return runOnce(principal, envelope, false).pipe(
      Effect.catchTag("StaleCommand", () =>
        runOnce(principal, envelope, true).pipe(Effect.catchTag("StaleCommand", (stale) => Effect.fail(stale.notFound))))
    )
  }

  const commandsChanged: IngestService["commandsChanged"] = (organisationId) =>
    Effect.andThen(
      Effect.sync(() => commands.forgetOrganisation(organisationId)),
      bus.control({ type: "commands.changed", organisationId })
    )

  return { runCommand, commandsChanged, forgetCommands: commands.clear }
})
