import { Console, Effect, Layer, Option, References } from "effect"
import { AppConfig } from "../config.ts"
import { bootstrap, type Bootstrapped } from "./bootstrap.ts"
import { migrate } from "./migrate.ts"

/** The command-line tool as the README runs it, named in messages that point at it. */
export const CLI = "npm run voltaic --"

/**
 * The secrets, shown once: a block of text for the person at the terminal, or with
 * `LOG_FORMAT=json` one log line with them as fields (a block of text would break a collector's
 * one-object-per-line parsing, and the secrets would be lost among the fragments).
 */
const printBootstrap = (b: Bootstrapped, format: "text" | "json") =>
  format === "json"
    ? Effect.logWarning("Voltaic created its first organisation. These secrets are shown once; keep them.", {
      adminEmail: b.emailAddress,
      ...(b.generatedPassword ? { adminPassword: b.generatedPassword } : {}),
      applicationKey: b.generatedAppKey ? b.appKey : "(BOOTSTRAP_APP_KEY)"
      // Shown whatever LOG_LEVEL says, as the text block is.
    }).pipe(Effect.provideService(References.MinimumLogLevel, "All"))
    : Console.log(
    [
      "",
      "Voltaic created its first organisation. These secrets are shown once; keep them.",
      `  admin e-mail:     ${b.emailAddress}`,
      ...(b.generatedPassword ? [`  admin password:   ${b.generatedPassword}`] : []),
      ...(b.generatedAppKey ? [`  application key:  ${b.appKey}`] : ["  application key:  (BOOTSTRAP_APP_KEY)"]),
      ""
    ].join("\n")
  )

/**
 * Migrations, then the first organisation on an empty database, its secrets printed once.
 * Built after every listener is bound (`ListenersLive`), so a start that cannot serve creates
 * nothing. On a database that has one, the first-start settings are ignored, with a warning.
 */
export const SetupLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const applied = yield* migrate
    if (applied.length > 0) yield* Effect.logInfo(`applied migrations: ${applied.join(", ")}`)
    const created = yield* bootstrap(config)
    if (Option.isSome(created)) return yield* printBootstrap(created.value, config.logFormat)
    if (Option.isSome(config.bootstrapAppKey)) {
      yield* Effect.logWarning(
        `BOOTSTRAP_APP_KEY is ignored: it is read on the first start only, and this database has its organisation; for a new application key run \`${CLI} keys create\``
      )
    }
    if (Option.isSome(config.adminPassword)) {
      yield* Effect.logWarning(
        `ADMIN_PASSWORD is ignored: it is read on the first start only, and this database has its organisation; to set a new password run \`${CLI} admin reset-password\``
      )
    }
  })
)
