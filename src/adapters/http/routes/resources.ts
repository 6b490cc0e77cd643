import { z } from "@hono/zod-openapi"
import { Effect } from "effect"
import { deleteRow, getOne, insertRow, listOf, type ListParams, type Page, type ResourceQuery, type Table, updateRow } from "../../../store/crud.ts"
import { Sql, type SqlClient, type SqlError } from "../../../store/Sql.ts"
import { reseedSpaces } from "../../../entities/spaceReads.ts"
import { DeviceReads } from "../../../store/DeviceReads.ts"
import type { DomainError } from "../../../domain/errors.ts"
import { idParams, listParams } from "../params.ts"
import { type Api, type HttpServices, type JsonText, listReply } from "../route.ts"
import { deletedSchema } from "../schemas.ts"

export interface ResourceSpec<T> {
  /** `/spaces` */
  readonly path: string
  readonly tag: string
  /** `{<plural>, count}` list body; undefined for a bare array. */
  readonly plural: string | undefined
  readonly table: Table
  readonly query: ResourceQuery<T>
  readonly schema: z.ZodType
  readonly createBody: z.ZodType<Record<string, unknown>>
  readonly updateBody: z.ZodType<Record<string, unknown>>
  /** List filters: query parameter (`space.id`) → column of the resource table. */
  readonly filters?: Readonly<Record<string, string>>
  /** `search` on the list: a case-insensitive substring of any of these columns (devices: name, customId). */
  readonly search?: { readonly columns: ReadonlyArray<string>; readonly description: string }
  /** Who may list (default `read`): spaces are also listed by management tokens. */
  readonly listAccess?: "read" | "directory"
  /** Replaces the default create (a device answers with its secret key). */
  readonly create?: {
    readonly response: z.ZodType
    readonly handler: (organisationId: string, body: Record<string, unknown>) => Effect.Effect<unknown, DomainError | SqlError, HttpServices>
  }
  /**
   * Checks an update against the stored row it changes and answers the body to write (an alert
   * rule's `config` is read by the rule's type, which the body does not carry). It runs in the
   * update's transaction, so it should read the row `FOR UPDATE`; a row it does not find is left
   * to the update's own 404.
   */
  readonly prepareUpdate?: (
    tx: SqlClient,
    organisationId: string,
    id: string,
    body: Record<string, unknown>
  ) => Effect.Effect<Record<string, unknown>, DomainError | SqlError>
  /** Runs after an update, with the row and the fields written (a device moved to another space or product). */
  readonly afterUpdate?: (organisationId: string, id: string, body: Record<string, unknown>) => Effect.Effect<void, never, HttpServices>
  /** Runs after a delete (a deleted device's key must stop working at once), with the organisation. */
  readonly afterDelete?: (organisationId: string) => Effect.Effect<void, never, HttpServices>
  /** Answers `GET {path}/{id}` instead of the store query (devices: a cached read). */
  readonly readOne?: (organisationId: string, id: string) => Effect.Effect<unknown, DomainError | SqlError, HttpServices>
  /** Runs after any create, update or delete, with the organisation (rules reconfigure actors). */
  readonly afterWrite?: (organisationId: string) => Effect.Effect<void, never, HttpServices>
  /**
   * The spaces whose Space entity an update or delete of this row changes (a device's space, a
   * space itself, the spaces of a rule's open alerts): read before and after the write, and told
   * to reseed once it is committed. A create changes none.
   */
  readonly spacesOf?: (sql: SqlClient, organisationId: string, id: string) => Effect.Effect<ReadonlyArray<string>, SqlError>
  /**
   * Answers a list page from a cache, reading it with `load` on a miss (devices: DeviceReads).
   * `key` names the organisation and the whole query; `order` is the query's `order`.
   */
  readonly cachedList?: (
    organisationId: string,
    key: string,
    order: string,
    load: Effect.Effect<Page<T>, SqlError>
  ) => Effect.Effect<Page<T>, SqlError, HttpServices>
  /**
   * Answers a list page itself instead of `present` and the JSON of its items (devices: text
   * built from each cached device's memoised JSON and its live fields).
   */
  readonly renderList?: (page: Page<T>) => Effect.Effect<JsonText, SqlError, HttpServices>
  /** Completes what the store query read before it is answered (spaces: live counts from their entities). */
  readonly present?: (items: ReadonlyArray<T>) => Effect.Effect<Array<T>, SqlError, HttpServices>
}

/**
 * Devices embed their space and product and point at places and gateways, and pages of spaces
 * list spaces with their alert recipients: any change to these drops the organisation's cached
 * reads and pages (in every process).
 */
export const devicesChanged = (organisationId: string) => DeviceReads.use((reads) => reads.changed(organisationId))

/** Create, read, update, delete and list for a resource table of one organisation. */
export const registerResource = <T>(api: Api, spec: ResourceSpec<T>): void => {
  const name = spec.table.resource
  const orders = Object.keys(spec.query.order)
  const filters = spec.filters ?? {}
  const spacesOf = (organisationId: string, id: string): Effect.Effect<ReadonlyArray<string>, SqlError, Sql> => {
    const read = spec.spacesOf
    return read === undefined ? Effect.succeed([]) : Sql.use((sql) => read(sql, organisationId, id))
  }
  const present = (item: T) => (spec.present === undefined ? Effect.succeed(item) : Effect.map(spec.present([item]), (items) => items[0]))
  const listQuery = z.object({
    ...listParams(orders, orders[0]),
    ...Object.fromEntries(Object.keys(filters).map((param) => [param, z.string().max(200).optional()])),
    ...(spec.search === undefined ? {} : { search: z.string().max(200).optional().openapi({ description: spec.search.description }) })
  })

  const createRow = Effect.fnUntraced(function*(organisationId: string, body: Record<string, unknown>) {
    const sql = yield* Sql
    const id = yield* insertRow(sql, spec.table, organisationId, body)
    return yield* present(yield* getOne(sql, spec.query, organisationId, id))
  })

  api.route({
    method: "post",
    path: spec.path,
    tag: spec.tag,
    summary: `Create a ${name}`,
    access: "write",
    body: spec.createBody,
    response: spec.create?.response ?? spec.schema,
    handler: ({ principal, body }) =>
      (spec.create !== undefined ? spec.create.handler(principal.organisationId, body) : createRow(principal.organisationId, body)).pipe(
        // No space is reseeded: a new row changes no space's counts (a new device is neither online
        // nor offline, and joins its space with its first change; a new space seeds when first
        // read). Reseeding the device's space read every device of it again, per create: 10,000
        // devices created in one space took 26–31 ms each, against ~9 ms spread over 50 spaces.
        // A cached list (devices, spaces) has a row more: the organisation's pages go.
        Effect.tap(() => spec.cachedList === undefined ? Effect.void : devicesChanged(principal.organisationId)),
        Effect.tap(() => spec.afterWrite === undefined ? Effect.void : spec.afterWrite(principal.organisationId))
      )
  })

  api.route({
    method: "get",
    path: `${spec.path}/:id`,
    tag: spec.tag,
    summary: `Get a ${name}`,
    access: "read",
    params: idParams,
    response: spec.schema,
    handler: ({ principal, params }) =>
      spec.readOne !== undefined
        ? spec.readOne(principal.organisationId, params.id)
        : Sql.use((sql) => getOne(sql, spec.query, principal.organisationId, params.id)).pipe(Effect.flatMap(present))
  })

  api.route({
    method: "put",
    path: `${spec.path}/:id`,
    tag: spec.tag,
    summary: `Update a ${name}`,
    description: "Fields left out are unchanged; null clears an optional field.",
    access: "write",
    params: idParams,
    body: spec.updateBody,
    response: spec.schema,
    handle: function*({ principal, params, body }) {
      const sql = yield* Sql
      const before = yield* spacesOf(principal.organisationId, params.id)
      const prepare = spec.prepareUpdate
      yield* prepare === undefined
        ? updateRow(sql, spec.table, principal.organisationId, params.id, body)
        : sql.transaction((tx) =>
          Effect.flatMap(prepare(tx, principal.organisationId, params.id, body), (checked) => updateRow(tx, spec.table, principal.organisationId, params.id, checked))
        )
      yield* devicesChanged(principal.organisationId)
      yield* reseedSpaces([...before, ...yield* spacesOf(principal.organisationId, params.id)])
      if (spec.afterUpdate !== undefined) yield* spec.afterUpdate(principal.organisationId, params.id, body)
      if (spec.afterWrite !== undefined) yield* spec.afterWrite(principal.organisationId)
      return yield* present(yield* getOne(sql, spec.query, principal.organisationId, params.id))
    }
  })

  api.route({
    method: "delete",
    path: `${spec.path}/:id`,
    tag: spec.tag,
    summary: `Delete a ${name}`,
    access: "write",
    params: idParams,
    response: deletedSchema,
    handle: function*({ principal, params }) {
      const sql = yield* Sql
      const before = yield* spacesOf(principal.organisationId, params.id)
      yield* deleteRow(sql, spec.table, principal.organisationId, params.id)
      yield* devicesChanged(principal.organisationId)
      yield* reseedSpaces(before)
      if (spec.afterDelete !== undefined) yield* spec.afterDelete(principal.organisationId)
      if (spec.afterWrite !== undefined) yield* spec.afterWrite(principal.organisationId)
      return { id: params.id, deleted: true }
    }
  })

  api.route({
    method: "get",
    path: spec.path,
    tag: spec.tag,
    summary: `List ${name}s`,
    access: spec.listAccess ?? "read",
    query: listQuery,
    response: spec.plural === undefined
      ? z.array(spec.schema)
      : z.object({ [spec.plural]: z.array(spec.schema), count: z.number().int() }),
    handle: function*({ principal, query }) {
      const sql = yield* Sql
      const q = query as Record<string, unknown> & z.output<z.ZodObject<ReturnType<typeof listParams>>>
      if (q["organisation.id"] !== undefined && q["organisation.id"] !== principal.organisationId) {
        return listReply({ items: [], total: 0 }, spec.plural)
      }
      const organisationId = principal.organisationId
      const filterValues = Object.entries(filters).map(([param, column]) => [column, q[param]] as const)
      const list: ListParams = { limit: q.limit, page: q.page, sort: q.sort, orderBy: spec.query.order[q.order], since: q.since, until: q.until }
      const search = spec.search === undefined ? undefined : { columns: spec.search.columns, text: typeof q.search === "string" ? q.search : undefined }
      const load = listOf(sql, spec.query, organisationId, filterValues, list, search)
      const page = spec.cachedList === undefined
        ? yield* load
        : yield* spec.cachedList(organisationId, JSON.stringify([organisationId, filterValues, list, search?.text ?? null]), q.order, load)
      if (spec.renderList !== undefined) return yield* spec.renderList(page)
      const items = spec.present === undefined ? page.items : yield* spec.present(page.items)
      return listReply({ items, total: page.total }, spec.plural)
    }
  })
}
