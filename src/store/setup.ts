import { Console, Effect, Layer, Option } from "effect"
import { AppConfig } from "../config.ts"
import { bootstrap, type Bootstrapped } from "./bootstrap.ts"
import { migrate } from "./migrate.ts"

/** The command-line tool as the README runs it, named in messages that point at it. */
export const CLI = "npm run voltaic --"

const printBootstrap = (b: Bootstrapped) =>
  Console.log(
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
    if (Option.isSome(created)) return yield* printBootstrap(created.value)
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
