import { Effect, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { insertOrganisation } from "./accounts.ts"
import { Sql } from "./Sql.ts"

/** Any constant shared by every process: only one of several starting processes bootstraps. */
const BOOTSTRAP_LOCK = 7_215_032

export interface BootstrapSettings {
  readonly bootstrapAppKey: Option.Option<Redacted.Redacted<string>>
  readonly adminEmail: Option.Option<string>
  readonly adminPassword: Option.Option<Redacted.Redacted<string>>
}

export interface Bootstrapped {
  readonly organisationId: string
  readonly emailAddress: string
  /** Present only when generated here; it is printed once and never stored in clear. */
  readonly generatedPassword: string | undefined
  readonly appKey: string
  readonly generatedAppKey: boolean
}

/**
 * First start on an empty database: the platform organisation, its owner (the platform
 * administrator) and an application key. Later starts find an organisation and do nothing.
 */
export const bootstrap = Effect.fnUntraced(function*(settings: BootstrapSettings) {
  const sql = yield* Sql
  return yield* sql.transaction((tx) =>
    Effect.gen(function*() {
      yield* tx.query("SELECT pg_advisory_xact_lock($1)", [BOOTSTRAP_LOCK])
      const existing = yield* tx.query("SELECT 1 FROM organisations LIMIT 1")
      if (existing.length > 0) return Option.none<Bootstrapped>()
      const generatedPassword = Option.isNone(settings.adminPassword) ? randomBytes(12).toString("base64url") : undefined
      const password = generatedPassword ?? Redacted.value(Option.getOrThrow(settings.adminPassword))
      const emailAddress = Option.getOrElse(settings.adminEmail, () => "admin@voltaic.local")
      const created = yield* insertOrganisation(tx, {
        name: "Default organisation",
        isPlatform: true,
        owner: { emailAddress, fullName: "Administrator", password },
        appKey: Option.map(settings.bootstrapAppKey, Redacted.value).pipe(Option.getOrUndefined)
      })
      return Option.some<Bootstrapped>({
        organisationId: created.organisation.id,
        emailAddress,
        generatedPassword,
        appKey: created.apiKey.secretKey,
        generatedAppKey: Option.isNone(settings.bootstrapAppKey)
      })
    })
  )
})
