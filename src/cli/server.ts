import { Console, Effect } from "effect"
import { Command } from "effect/cli"
import { AppConfig, databaseTarget } from "../config.ts"
import { serve } from "../launch.ts"
import { loadMigrations, migrate } from "../store/migrate.ts"
import { cliDatabase, describeTarget } from "./store.ts"

/**
 * `voltaic start`: the server, as `src/main.ts` serves it. The tool runs every command through
 * the same `run` as the server's entry, so SIGINT and SIGTERM drain and stop it the same way.
 * The application is loaded here only: the other commands start in a fraction of the time.
 */
export const startCommand = Command.make("start", {}, () =>
  Effect.flatMap(Effect.promise(() => import("../nodeServer.ts")), ({ NodeAppLive }) => serve(NodeAppLive))).pipe(
  Command.withDescription("Start the server (as npm start does, without building); SIGINT or SIGTERM stops it")
)

/** `voltaic migrate`: the migrations a start would apply, applied now, and which they were. */
export const migrateCommand = Command.make("migrate", {}, () =>
  Effect.gen(function*() {
    const where = describeTarget(databaseTarget(yield* AppConfig))
    const applied = yield* migrate
    const all = yield* loadMigrations
    const last = all.at(-1)?.name ?? "none"
    yield* Console.log(
      applied.length === 0
        ? `${where}: the schema is current (${all.length} migrations, the last ${last}); nothing to apply.`
        : [
          `${where}: applied ${applied.length} migration${applied.length === 1 ? "" : "s"}:`,
          ...applied.map((name) => `  ${name}`),
          `The schema is current (${all.length} migrations, the last ${last}).`
        ].join("\n")
    )
  }).pipe(Effect.provide(cliDatabase("migrate")))).pipe(
    Command.withDescription("Apply the database migrations a start would apply, and say which")
  )
