import { Effect, Layer, Redacted } from "effect"
import { AppConfig, databaseTarget, type DatabaseTarget } from "../config.ts"
import { migrate } from "../store/migrate.ts"
import { redactUrl, Sql } from "../store/Sql.ts"

/**
 * The database the server would open, from the same settings (`DATABASE_URL`, `DATA_DIR`),
 * as it is. On PGlite it takes the `DATA_DIR` lock, so it refuses while a server (or another
 * command) holds the directory; `command` names this one in the lock.
 */
export const cliDatabase = (command: string) =>
  Layer.unwrap(Effect.map(AppConfig, (config) => Sql.layer(databaseTarget(config), `voltaic ${command}`)))

/** `cliDatabase`, migrated first: what the commands that read or write rows work on. */
export const cliStore = (command: string) => Layer.effectDiscard(migrate).pipe(Layer.provideMerge(cliDatabase(command)))

/** The database in words, its password hidden: `PGlite in ./data`, `Postgres at postgres://u:***@h/db`. */
export const describeTarget = (target: DatabaseTarget): string =>
  target._tag === "postgres"
    ? `Postgres at ${redactUrl(Redacted.value(target.url))}`
    : target.dataDir === undefined
    ? "PGlite in memory"
    : `PGlite in ${target.dataDir}`
