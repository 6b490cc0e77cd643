import { z } from "@hono/zod-openapi"
import { Effect } from "effect"
import { InvalidInput } from "../../../domain/errors.ts"
import { alertJsonText, alertQuery, ruleQuery, rulesTable, templateQuery, templatesTable } from "../../../store/alerts.ts"
import { getOne, listRows } from "../../../store/crud.ts"
import { Sql, type SqlClient } from "../../../store/Sql.ts"
import { spacesWithOpenAlerts } from "../../../entities/spaceReads.ts"
import { resolveAlert } from "../../../entities/alertRequests.ts"
import { DeviceOwners } from "../../../entities/DeviceOwners.ts"
import { DeviceReads } from "../../../store/DeviceReads.ts"
import { parseInput } from "../../validation.ts"
import { booleanParam, idParams, listParams, refSchema } from "../params.ts"
import { type Api, JsonText, listReply } from "../route.ts"
import { registerResource } from "./resources.ts"

/** A page of alerts holds no device's signs of life; alert writes drop it. */
const ALERT_PAGE = { devices: () => [], anySign: false, alerts: true } as const

const bool = z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")])
const severity = z.enum(["low", "medium", "high", "critical"])
const eventName = z.string().min(1).max(200)
const path = z.string().min(1).max(200).optional()

const offlineConfig = z.object({ afterSeconds: z.number().int().min(1).max(365 * 24 * 3600) })
const thresholdConfig = z.object({ eventName, path, min: z.number().optional(), max: z.number().optional() })
  .refine((c) => c.min !== undefined || c.max !== undefined, { message: "needs min, max or both", path: ["min"] })
const anomalyConfig = z.object({ eventName, path, window: z.number().int().min(2).max(10_000), zScore: z.number().positive() })

const ruleCommon = {
  name: z.string().min(1).max(200),
  severity,
  enabled: bool.optional(),
  autoResolve: bool.optional(),
  product: refSchema.nullable().optional(),
  space: refSchema.nullable().optional(),
  notificationTemplate: refSchema.nullable().optional()
}

const createRuleBody = z.discriminatedUnion("type", [
  z.object({ ...ruleCommon, type: z.literal("offline"), config: offlineConfig }),
  z.object({ ...ruleCommon, type: z.literal("threshold"), config: thresholdConfig }),
  z.object({ ...ruleCommon, type: z.literal("anomaly"), config: anomalyConfig })
])

const updateRuleBody = z.object({
  name: ruleCommon.name.optional(),
  severity: severity.optional(),
  enabled: ruleCommon.enabled,
  autoResolve: ruleCommon.autoResolve,
  product: ruleCommon.product,
  space: ruleCommon.space,
  notificationTemplate: ruleCommon.notificationTemplate,
  // The config of some type, every key kept: `ruleConfigFor` parses it by the stored rule's type,
  // which the body does not carry (the first option that fits would strip another type's keys).
  config: z.union([offlineConfig.loose(), thresholdConfig.loose(), anomalyConfig.loose()]).optional()
    .openapi({ description: "The whole config for the rule's type." })
})

const configByType = { offline: offlineConfig, threshold: thresholdConfig, anomaly: anomalyConfig } as const
const anyConfig = z.union([offlineConfig, thresholdConfig, anomalyConfig])

/** An update's `config`, parsed by the type of the rule it changes (locked for the update). */
const ruleConfigFor = (tx: SqlClient, organisationId: string, id: string, body: Record<string, unknown>) =>
  body.config === undefined
    ? Effect.succeed(body)
    : Effect.flatMap(
      tx.query<{ type: string }>("SELECT type FROM alert_rules WHERE id = $1 AND organisation_id = $2 FOR UPDATE", [id, organisationId]),
      (rows) => {
        const type = rows[0]?.type
        // No such rule (the update answers 404): a config that fits no type is still refused first.
        const schema = type !== undefined && type in configByType ? configByType[type as keyof typeof configByType] : anyConfig
        const parsed = parseInput(z.object({ config: schema }), { config: body.config }, "body")
        return parsed instanceof InvalidInput ? Effect.fail(parsed) : Effect.succeed({ ...body, config: parsed.config })
      }
    )

/** A webhook template keeps a URL: the update's type and URL taken with the stored ones (locked for the update). */
const templateUpdateFor = (tx: SqlClient, organisationId: string, id: string, body: Record<string, unknown>) =>
  body.type === undefined && body.webhookUrl === undefined
    ? Effect.succeed(body)
    : Effect.flatMap(
      tx.query<{ type: string; webhook_url: string | null }>(
        "SELECT type, webhook_url FROM notification_templates WHERE id = $1 AND organisation_id = $2 FOR UPDATE",
        [id, organisationId]
      ),
      (rows) => {
        const stored = rows[0]
        if (stored === undefined) return Effect.succeed(body)
        const type = body.type ?? stored.type
        const url = body.webhookUrl === undefined ? stored.webhook_url : body.webhookUrl
        return type === "webhook" && url === null
          ? Effect.fail(new InvalidInput({ field: "webhookUrl", message: "webhookUrl: is required for a webhook template" }))
          : Effect.succeed(body)
      }
    )

const ruleSchema = z.object({
  id: z.string(),
  name: z.string(),
  type: z.enum(["offline", "threshold", "anomaly"]),
  severity,
  enabled: z.boolean(),
  autoResolve: z.boolean(),
  config: z.record(z.string(), z.unknown()),
  organisation: z.object({ id: z.string(), name: z.string() }),
  product: refSchema.nullable(),
  space: refSchema.nullable(),
  notificationTemplate: refSchema.nullable(),
  createdAt: z.number().int(),
  updatedAt: z.number().int()
}).openapi("AlertRule")

const templateFields = {
  title: z.string().max(1000).optional(),
  body: z.string().max(100_000).optional(),
  webhookUrl: z.url({ protocol: /^https?$/, message: "must be an http(s) URL" }).nullable().optional(),
  webhookHeaders: z.record(z.string(), z.string()).nullable().optional(),
  config: z.record(z.string(), z.unknown()).nullable().optional()
}
const createTemplateBody = z.object({ type: z.enum(["webhook", "email"]), ...templateFields })
  .refine((t) => t.type !== "webhook" || (t.webhookUrl ?? null) !== null, { message: "is required for a webhook template", path: ["webhookUrl"] })
const updateTemplateBody = z.object({ type: z.enum(["webhook", "email"]).optional(), ...templateFields })

const templateSchema = z.object({
  id: z.string(),
  title: z.string(),
  type: z.string(),
  body: z.string(),
  webhookUrl: z.string().nullable(),
  webhookHeaders: z.record(z.string(), z.unknown()).nullable(),
  config: z.record(z.string(), z.unknown()).nullable(),
  createdAt: z.number().int(),
  updatedAt: z.number().int()
}).openapi("NotificationTemplate")

const alertSchema = z.object({
  id: z.string(),
  state: z.enum(["unresolved", "acknowledged", "resolved"]),
  note: z.string(),
  event: z.object({ id: z.string().nullable(), name: z.string(), data: z.unknown(), timestamp: z.number().int().nullable() }).nullable(),
  device: z.object({
    id: z.string(),
    name: z.string(),
    customId: z.string().nullable(),
    space: refSchema.nullable(),
    product: refSchema.nullable()
  }).nullable(),
  gateway: refSchema.nullable(),
  alertRule: z.object({ id: z.string(), name: z.string(), type: z.string(), severity: z.string(), autoResolve: z.boolean() }),
  firstSeenAt: z.number().int(),
  lastSeenAt: z.number().int(),
  acknowledgedAt: z.number().int().nullable(),
  resolvedAt: z.number().int().nullable(),
  notifications: z.array(z.unknown()),
  createdAt: z.number().int(),
  updatedAt: z.number().int()
}).openapi("Alert")

/** Alert rules, notification templates and alerts (API-DECISIONS "Alerts"). */
export const alertRoutes = (api: Api): void => {
  registerResource(api, {
    path: "/notificationTemplates",
    tag: "Alerts",
    plural: "notificationTemplates",
    table: templatesTable,
    query: templateQuery,
    schema: templateSchema,
    createBody: createTemplateBody,
    updateBody: updateTemplateBody,
    prepareUpdate: templateUpdateFor
  })

  registerResource(api, {
    path: "/alertRules",
    tag: "Alerts",
    plural: "alertRules",
    table: rulesTable,
    query: ruleQuery,
    schema: ruleSchema,
    createBody: createRuleBody,
    updateBody: updateRuleBody,
    prepareUpdate: ruleConfigFor,
    filters: { "space.id": "space_id", "product.id": "product_id" },
    // A deleted rule takes its alerts along: the spaces' open-alert counts drop.
    spacesOf: (sql, organisationId, id) => spacesWithOpenAlerts(sql, organisationId, { ruleId: id }),
    // Alerts embed their rule: this process's pages of alerts go at once (the notice reaches the others).
    afterWrite: (organisationId) =>
      Effect.andThen(
        DeviceOwners.use((owners) => owners.rulesChanged(organisationId)),
        DeviceReads.use((reads) => reads.alertsChanged([organisationId]))
      )
  })

  api.route({
    method: "get",
    path: "/alerts",
    tag: "Alerts",
    summary: "List alerts",
    description: "unresolved=true: open alerts (unresolved or acknowledged); resolved=true: resolved ones. " +
      "product.id and space.id select alerts of devices of that product or space; device.id those of one device.",
    access: "read",
    query: z.object({
      unresolved: booleanParam,
      resolved: booleanParam,
      "organisation.id": z.string().max(200).optional(),
      "product.id": z.string().max(200).optional(),
      "space.id": z.string().max(200).optional(),
      "alertRule.id": z.string().max(200).optional(),
      "device.id": z.string().max(200).optional(),
      ...listParams(Object.keys(alertQuery.order), "createdAt")
    }),
    response: z.array(alertSchema),
    handle: function*({ principal, query }) {
      if (query["organisation.id"] !== undefined && query["organisation.id"] !== principal.organisationId) {
        return listReply({ items: [], total: 0 })
      }
      if (query.unresolved === true && query.resolved === true) {
        return yield* new InvalidInput({ field: "resolved", message: "resolved: cannot be combined with unresolved=true" })
      }
      // unresolved=false means resolved, resolved=false means open.
      const resolved = query.unresolved !== undefined ? !query.unresolved : query.resolved
      const params: Array<unknown> = [principal.organisationId]
      const where = ["a.organisation_id = $1"]
      if (resolved === true) where.push("a.resolved_at IS NOT NULL")
      if (resolved === false) where.push("a.resolved_at IS NULL")
      const equal: Array<readonly [string, string | undefined]> = [
        ["a.alert_rule_id", query["alertRule.id"]],
        ["d.product_id", query["product.id"]],
        ["d.space_id", query["space.id"]],
        ["a.device_id", query["device.id"]]
      ]
      for (const [column, value] of equal) {
        if (value === undefined) continue
        params.push(value)
        where.push(`${column} = $${params.length}`)
      }
      // Cached per organisation and query (DeviceReads): dropped by every alert written or delivered.
      const key = `alerts\u0000${principal.organisationId}\u0000${JSON.stringify(query)}`
      const reads = yield* DeviceReads
      const page = yield* reads.page(principal.organisationId, key, ALERT_PAGE, Sql.use((sql) =>
        listRows(sql, {
          select: alertJsonText,
          from: alertQuery.from,
          base: "alerts a LEFT JOIN devices d ON d.id = a.device_id",
          alias: "a",
          where,
          params,
          timeColumn: "a.created_at"
        }, { ...query, orderBy: alertQuery.order[query.order] }).pipe(
          // Each row is its alert's JSON already (`alertJsonText`): the page is sent as it is.
          Effect.map((page) => ({ items: page.items.map((row) => String(row.json)), total: page.total }))
        )))
      return new JsonText(`[${page.items.join(",")}]`, { "X-Total-Count": String(page.total) })
    }
  })

  api.route({
    method: "get",
    path: "/alerts/:id",
    tag: "Alerts",
    summary: "Get an alert with its event, device, gateway and rule",
    access: "read",
    params: idParams,
    response: alertSchema,
    handler: ({ principal, params }) => Sql.use((sql) => getOne(sql, alertQuery, principal.organisationId, params.id))
  })

  api.route({
    method: "put",
    path: "/alerts/:id/resolve",
    tag: "Alerts",
    summary: "Acknowledge and/or resolve an alert",
    description: "resolvedAt resolves (idempotent); acknowledgedAt alone acknowledges; neither resolves now. " +
      "A resolved alert does not reopen.",
    access: "write",
    params: idParams,
    body: z.object({ resolvedAt: z.number().int().min(0).optional(), acknowledgedAt: z.number().int().min(0).optional() }),
    response: alertSchema,
    handle: function*({ principal, params, body }) {
      const alert = yield* resolveAlert(principal.organisationId, params.id, body)
      // The alert's entity may be another process's: this one's pages go before it answers.
      yield* DeviceReads.use((reads) => reads.alertsChanged([principal.organisationId]))
      return alert
    }
  })
}
