import { Effect } from "effect"
import { NotFound } from "../domain/errors.ts"
import { alertQuery } from "../store/alerts.ts"
import { getOne } from "../store/crud.ts"
import { Sql } from "../store/Sql.ts"
import { AlertBucket, alertBucketOf } from "./protocol.ts"

/**
 * `PUT /alerts/{id}/resolve`, answered from the alert's entity: the alert is looked up in the
 * caller's organisation (404 otherwise), the AlertBucket entity of its device applies the
 * acknowledgement and the resolution, one message at a time with everything else that happens
 * to that alert, and the row it wrote is answered.
 */
export const resolveAlert = (
  organisationId: string,
  alertId: string,
  body: { readonly acknowledgedAt?: number | undefined; readonly resolvedAt?: number | undefined }
) =>
  Effect.gen(function*() {
    const sql = yield* Sql
    const [row] = yield* sql.query<{ alert_rule_id: string; device_id: string | null }>(
      "SELECT alert_rule_id, device_id FROM alerts WHERE id = $1 AND organisation_id = $2",
      [alertId, organisationId]
    )
    if (row === undefined) return yield* new NotFound({ resource: "alert", id: alertId })
    const entity = (yield* AlertBucket.client)(alertBucketOf(row.device_id))
    const slot = { alertId, ruleId: row.alert_rule_id, deviceId: row.device_id ?? "" }
    if (body.acknowledgedAt !== undefined) {
      const outcome = yield* Effect.orDie(entity.Acknowledge({ ...slot, at: body.acknowledgedAt }))
      if (!outcome.found) return yield* new NotFound({ resource: "alert", id: alertId })
    }
    if (body.resolvedAt !== undefined || body.acknowledgedAt === undefined) {
      const outcome = yield* Effect.orDie(entity.Resolve({ ...slot, at: body.resolvedAt ?? Date.now() }))
      if (!outcome.found) return yield* new NotFound({ resource: "alert", id: alertId })
    }
    return yield* getOne(sql, alertQuery, organisationId, alertId)
  })
