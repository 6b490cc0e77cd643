import { Effect } from "effect"
import { Conflict, InvalidInput, NotFound } from "../domain/errors.ts"
import { type IdPrefix, newId } from "../domain/ids.ts"
import type { Row, SqlClient, SqlError } from "./Sql.ts"

/** How one API field is stored. JSON columns are written as text and cast by the server. */
export interface Column {
  readonly column: string
  readonly json?: boolean
}

/** A reference such as `space: {id}` stored as `space_id`, checked to belong to the same organisation. */
export interface Reference {
  readonly column: string
  readonly table: string
  readonly resource: string
}

/** A resource table of one organisation: its columns and references, by API field name. */
export interface Table {
  readonly name: string
  readonly resource: string
  readonly prefix: IdPrefix
  readonly columns: Readonly<Record<string, Column>>
  readonly references: Readonly<Record<string, Reference>>
  /**
   * The field a unique constraint of the table holds, and its scope ("per device"): a conflict
   * names it (409 `slug: …`) rather than the constraint.
   */
  readonly unique?: { readonly field: string; readonly scope: string }
}

export interface ListParams {
  readonly limit: number
  readonly page: number
  readonly sort: "ASC" | "DESC"
  /** An SQL expression already checked against the resource's whitelist. */
  readonly orderBy: string
  readonly since?: number | undefined
  readonly until?: number | undefined
}

export interface Page<T> {
  readonly items: Array<T>
  readonly total: number
}

const placeholders = (values: Array<unknown>, value: unknown, json: boolean): string => {
  values.push(json ? (value === null ? null : JSON.stringify(value)) : value)
  // text then jsonb: the driver sends the JSON text as is instead of encoding a string value.
  return json ? `$${values.length}::text::jsonb` : `$${values.length}`
}

const checkReferences = (sql: SqlClient, table: Table, organisationId: string, input: Readonly<Record<string, unknown>>) =>
  Effect.forEach(
    Object.entries(table.references).filter(([field]) => input[field] !== undefined && input[field] !== null),
    ([field, ref]) => {
      const id = (input[field] as { id: string }).id
      return sql.query(`SELECT 1 FROM ${ref.table} WHERE id = $1 AND organisation_id = $2`, [id, organisationId]).pipe(
        Effect.flatMap((rows) => rows.length === 0 ? Effect.fail(new NotFound({ resource: ref.resource, id })) : Effect.void)
      )
    },
    { discard: true }
  )

const uniqueViolation = (table: Table, input: Readonly<Record<string, unknown>>) => (e: SqlError): Effect.Effect<never, Conflict | SqlError> => {
  if (e.code !== "23505") return Effect.fail(e)
  const unique = table.unique
  const message = unique !== undefined && input[unique.field] !== undefined
    ? `${unique.field}: must be unique ${unique.scope}; another ${table.resource} has ${JSON.stringify(input[unique.field])}`
    : `${table.resource}: conflicts with an existing ${table.resource}`
  return Effect.fail(new Conflict({ message }))
}

/** Inserts the given fields; references must exist in the organisation (else 404). Returns the new id. */
export const insertRow = Effect.fnUntraced(function*(
  sql: SqlClient,
  table: Table,
  organisationId: string,
  input: Readonly<Record<string, unknown>>,
  extra: Readonly<Record<string, unknown>> = {}
): Effect.fn.Return<string, NotFound | Conflict | SqlError> {
  yield* checkReferences(sql, table, organisationId, input)
  const now = Date.now()
  const id = newId(table.prefix, now)
  const columns = ["id", "organisation_id", "created_at", "updated_at"]
  const values: Array<unknown> = [id, organisationId, now, now]
  const exprs = ["$1", "$2", "$3", "$4"]
  for (const [field, spec] of Object.entries(table.columns)) {
    if (input[field] === undefined) continue
    columns.push(spec.column)
    exprs.push(placeholders(values, input[field], spec.json === true))
  }
  for (const [field, ref] of Object.entries(table.references)) {
    if (input[field] === undefined) continue
    columns.push(ref.column)
    exprs.push(placeholders(values, (input[field] as { id: string } | null)?.id ?? null, false))
  }
  for (const [column, value] of Object.entries(extra)) {
    columns.push(column)
    exprs.push(placeholders(values, value, false))
  }
  yield* sql.query(`INSERT INTO ${table.name} (${columns.join(", ")}) VALUES (${exprs.join(", ")})`, values).pipe(
    Effect.catchTag("SqlError", uniqueViolation(table, input))
  )
  return id
})

/** Updates the given fields of a row of the organisation; 404 when it is not there. */
export const updateRow = Effect.fnUntraced(function*(
  sql: SqlClient,
  table: Table,
  organisationId: string,
  id: string,
  input: Readonly<Record<string, unknown>>
): Effect.fn.Return<void, NotFound | Conflict | SqlError> {
  yield* checkReferences(sql, table, organisationId, input)
  const values: Array<unknown> = [id, organisationId, Date.now()]
  const sets = ["updated_at = $3"]
  for (const [field, spec] of Object.entries(table.columns)) {
    if (input[field] === undefined) continue
    sets.push(`${spec.column} = ${placeholders(values, input[field], spec.json === true)}`)
  }
  for (const [field, ref] of Object.entries(table.references)) {
    if (input[field] === undefined) continue
    sets.push(`${ref.column} = ${placeholders(values, (input[field] as { id: string } | null)?.id ?? null, false)}`)
  }
  const rows = yield* sql.query(
    `UPDATE ${table.name} SET ${sets.join(", ")} WHERE id = $1 AND organisation_id = $2 RETURNING id`,
    values
  ).pipe(Effect.catchTag("SqlError", uniqueViolation(table, input)))
  if (rows.length === 0) return yield* new NotFound({ resource: table.resource, id })
})

export const deleteRow = (sql: SqlClient, table: Table, organisationId: string, id: string) =>
  sql.query(`DELETE FROM ${table.name} WHERE id = $1 AND organisation_id = $2 RETURNING id`, [id, organisationId]).pipe(
    Effect.flatMap((rows) => rows.length === 0 ? Effect.fail(new NotFound({ resource: table.resource, id })) : Effect.void)
  )

/**
 * One page of a filtered list plus the total number of matches. The page's ids are chosen
 * first from `base` alone and only those rows are joined and rendered: a window count over the
 * joined query would render every match before LIMIT (bench/RESULTS.md).
 */
export const listRows = Effect.fnUntraced(function*(
  sql: SqlClient,
  query: {
    readonly select: string
    readonly from: string
    /** The filtered table without joins, e.g. `devices d`; `where`, order and time refer to it. */
    readonly base: string
    readonly alias: string
    readonly where: ReadonlyArray<string>
    readonly params: ReadonlyArray<unknown>
    readonly timeColumn: string
  },
  list: ListParams
): Effect.fn.Return<Page<Row>, SqlError> {
  const params = [...query.params]
  const where = [...query.where]
  if (list.since !== undefined) {
    params.push(list.since)
    where.push(`${query.timeColumn} >= $${params.length}`)
  }
  if (list.until !== undefined) {
    params.push(list.until)
    where.push(`${query.timeColumn} < $${params.length}`)
  }
  const whereSql = where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""
  const countParams = [...params]
  params.push(list.limit, list.page * list.limit)
  const a = query.alias
  const order = `${list.orderBy} ${list.sort}, ${a}.id ${list.sort}`
  const count = `SELECT count(*)::int8 AS n FROM ${query.base} ${whereSql}`
  // One statement: the count rides on every row of the page (an InitPlan, computed once). Each
  // statement is a round trip with its own socket writes and reads in the driver, which a
  // profile of \`GET /devices\` put at a fifth of the server's time; only a page past the end,
  // which has no row to carry it, asks for the count on its own.
  const rows = yield* sql.query(
    `WITH page AS (SELECT ${a}.id FROM ${query.base} ${whereSql} ORDER BY ${order}
                   LIMIT $${params.length - 1} OFFSET $${params.length})
     SELECT ${query.select}, (${count}) AS ${TOTAL} FROM ${query.from} JOIN page ON page.id = ${a}.id ORDER BY ${order}`,
    params
  )
  if (rows.length > 0) return { items: rows, total: Number(rows[0][TOTAL]) }
  if (list.page === 0) return { items: rows, total: 0 }
  const [counted] = yield* sql.query<{ n: number }>(count, countParams)
  return { items: rows, total: Number(counted.n) }
})

/** The column that carries a list's total on each row of its page (`listRows`). */
const TOTAL = "list_total_count__"

/** Rejects a field that must not be null on update. */
export const requireNonNull = (input: Readonly<Record<string, unknown>>, fields: ReadonlyArray<string>) =>
  Effect.forEach(fields, (field) =>
    input[field] === null ? Effect.fail(new InvalidInput({ field, message: `${field}: must not be null` })) : Effect.void,
    { discard: true })

/** How a resource is read: its SELECT (with joins), table alias, row mapper and order whitelist. */
export interface ResourceQuery<T> {
  readonly resource: string
  readonly select: string
  readonly from: string
  /** The resource table alone with its alias (`devices d`): lists filter and page on it. */
  readonly base: string
  readonly alias: string
  readonly map: (row: Row) => T
  /** API `order` values → SQL expressions; the first is the default. */
  readonly order: Readonly<Record<string, string>>
  readonly timeColumn?: string
}

export const getOne = <T>(sql: SqlClient, q: ResourceQuery<T>, organisationId: string, id: string) =>
  sql.query(
    `SELECT ${q.select} FROM ${q.from} WHERE ${q.alias}.id = $1 AND ${q.alias}.organisation_id = $2`,
    [id, organisationId]
  ).pipe(
    Effect.flatMap((rows) =>
      rows.length === 0 ? Effect.fail(new NotFound({ resource: q.resource, id })) : Effect.succeed(q.map(rows[0]))
    )
  )

/** Lists the organisation's rows matching every `column = value` filter. */
export const listOf = <T>(
  sql: SqlClient,
  q: ResourceQuery<T>,
  organisationId: string,
  filters: ReadonlyArray<readonly [string, unknown]>,
  list: ListParams,
  search?: { readonly columns: ReadonlyArray<string>; readonly text: string | undefined }
): Effect.Effect<Page<T>, SqlError> => {
  const params: Array<unknown> = [organisationId]
  const where = [`${q.alias}.organisation_id = $1`]
  for (const [column, value] of filters) {
    if (value === undefined) continue
    params.push(value)
    where.push(`${q.alias}.${column} = $${params.length}`)
  }
  if (search !== undefined && search.text !== undefined && search.text !== "" && search.columns.length > 0) {
    // A substring, case-insensitive; LIKE's own characters in the text are matched as they are.
    params.push(`%${search.text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)
    where.push(`(${search.columns.map((column) => `${q.alias}.${column} ILIKE $${params.length}`).join(" OR ")})`)
  }
  return listRows(sql, {
    select: q.select,
    from: q.from,
    base: q.base,
    alias: q.alias,
    where,
    params,
    timeColumn: q.timeColumn ?? `${q.alias}.created_at`
  }, list).pipe(Effect.map((page) => ({ items: page.items.map(q.map), total: page.total })))
}
