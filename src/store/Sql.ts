import { Context, Layer } from "effect"
import type { DatabaseTarget } from "../config.ts"
import { openPglite } from "./pgliteStore.ts"
import { openPostgres } from "./postgresStore.ts"
import type { SqlClient } from "./sqlClient.ts"

export { redactUrl } from "./postgresStore.ts"
export { isConnectionLoss, type Row, type ScriptStep, type SqlClient, SqlError, storeLost, StoreUnreachable } from "./sqlClient.ts"

export class Sql extends Context.Service<Sql, SqlClient>()("voltaic/store/Sql") {
  /** `role` names this process in the `DATA_DIR` lock, for the message another process shows. */
  static readonly layer = (target: DatabaseTarget, role = "voltaic server") =>
    Layer.effect(
      Sql,
      target._tag === "pglite" ? openPglite(target.dataDir, role) : openPostgres(target.url)
    )
}
