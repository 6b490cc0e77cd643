import { Effect, Layer } from "effect"
import { AppConfig, databaseTarget } from "../config.ts"
import { migrate } from "../store/migrate.ts"
import { Sql } from "../store/Sql.ts"

/**
 * The store the server would open, from the same settings (`DATABASE_URL`, `DATA_DIR`), migrated.
 * On PGlite it takes the `DATA_DIR` lock, so it refuses while a server (or another command)
 * holds the directory; `command` names this one in the lock.
 */
export const cliStore = (command: string) =>
  Layer.effectDiscard(migrate).pipe(
    Layer.provideMerge(Layer.unwrap(Effect.map(AppConfig, (config) => Sql.layer(databaseTarget(config), `voltaic ${command}`))))
  )
