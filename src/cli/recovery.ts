import { Console, Effect, Option, Redacted } from "effect"
import { Command, Flag } from "effect/cli"
import { Bus } from "../bus/Bus.ts"
import { createAppKey, resetPassword } from "../store/recovery.ts"
import { Sql } from "../store/Sql.ts"
import { cliStore } from "./store.ts"

/**
 * Tells running servers (over NATS_URL, when set) that credentials changed, as the API does
 * after a revocation, so they drop the revoked tokens at once. Not needing it to recover, a
 * bus that cannot be reached only gets a warning: servers stop accepting a revoked token
 * within their credential cache's 5 s anyway.
 */
const tellServers = Bus.use((bus) => bus.control({ type: "credentials.changed" })).pipe(
  Effect.provide(Bus.layer),
  Effect.catch((error) => Console.error(`voltaic: warning: running servers were not told (${error.message}); they drop revoked tokens within 5 s`))
)

/** `voltaic admin reset-password`: a new password for a user, whose tokens are all revoked. */
export const resetPasswordCommand = Command.make(
  "reset-password",
  {
    email: Flag.String("email").pipe(
      Flag.withDescription("E-mail address of the user (default: the owner of the first organisation)"),
      Flag.optional
    ),
    password: Flag.Redacted("password").pipe(
      Flag.withDescription("The new password, at least 8 characters (default: generated and printed once)"),
      Flag.optional
    )
  },
  ({ email, password }) =>
    Effect.gen(function*() {
      const sql = yield* Sql
      const reset = yield* resetPassword(sql, { emailAddress: email, password: Option.map(password, Redacted.value) })
      yield* tellServers
      const revoked = `${reset.revokedTokens} sign-in token${reset.revokedTokens === 1 ? "" : "s"} revoked`
      yield* Console.log(
        reset.generatedPassword === undefined
          ? `Password of ${reset.emailAddress} set to the one given; ${revoked}.`
          : [
            `Password of ${reset.emailAddress} set; ${revoked}. It is shown once; keep it.`,
            `  admin e-mail:     ${reset.emailAddress}`,
            `  admin password:   ${reset.generatedPassword}`
          ].join("\n")
      )
    }).pipe(Effect.provide(cliStore("admin reset-password")))
).pipe(Command.withDescription("Set a new password for a user and revoke the user's tokens"))

/** `voltaic admin`: operations on users. */
export const adminCommand = Command.make("admin").pipe(
  Command.withDescription("Recover access: users and their passwords"),
  Command.withSubcommands([resetPasswordCommand])
)

/** `voltaic keys create`: a new application key, printed once. */
export const keysCreateCommand = Command.make(
  "create",
  {
    organisation: Flag.String("organisation").pipe(
      Flag.withDescription("Id of the organisation, org_… (default: the first organisation)"),
      Flag.optional
    ),
    name: Flag.String("name").pipe(Flag.withDescription("Name of the key, shown in lists"), Flag.withDefault("recovery")),
    readOnly: Flag.Boolean("read-only").pipe(Flag.withDescription("A key that may only read"), Flag.withDefault(false))
  },
  ({ organisation, name, readOnly }) =>
    Effect.gen(function*() {
      const sql = yield* Sql
      const created = yield* createAppKey(sql, { organisationId: organisation, name, readOnly })
      yield* Console.log(
        [
          `New application key "${created.key.name}" for ${created.organisation.name} (${created.organisation.id}). It is shown once; keep it.`,
          `  application key:  ${created.key.secretKey}`
        ].join("\n")
      )
    }).pipe(Effect.provide(cliStore("keys create")))
).pipe(Command.withDescription("Create an application key for an organisation"))

/** `voltaic keys`: application keys. */
export const keysCommand = Command.make("keys").pipe(
  Command.withDescription("Application keys"),
  Command.withSubcommands([keysCreateCommand])
)
