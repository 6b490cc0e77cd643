import { Effect } from "effect"
import type { SqlClient, SqlError } from "./Sql.ts"

/**
 * Persistent MQTT sessions in the shared store (migrations/0011_mqtt_sessions.sql): what a
 * client id that connected with clean session 0 finds again on any process, after a restart
 * too. The statements only; `src/adapters/mqtt/persistence.ts` puts them behind aedes.
 */

/** The database clock in epoch milliseconds, so every process stamps against one clock. */
const NOW_MS = "(extract(epoch FROM now()) * 1000)::bigint"

/** How long an acknowledged delivery is remembered, so a late copy from another process cannot queue it again. */
export const ACKNOWLEDGED_KEPT_MS = 10 * 60_000

/** A subscription as stored: its filter, the device it names, and the QoS granted. */
export interface StoredSubscription {
  readonly topic: string
  readonly deviceId: string
  readonly qos: number
}

/** A delivery kept for a client id, in the order queued. */
export interface QueuedDelivery {
  readonly topic: string
  readonly payload: string
  readonly qos: number
  /** The packet identifier it was last sent with, if it was sent. */
  readonly messageId: number | undefined
}

/**
 * An MQTT filter as a LIKE pattern: `+` and `#` levels match anything. Good enough because
 * every filter names one device and delivery topics have a fixed number of levels, none of
 * them holding a `/` (`subscriptionDevice`, `parsePublishTopic`).
 */
export const likePattern = (filter: string): string =>
  filter.split("/").map((level) => level === "+" || level === "#" ? "%" : level.replace(/[\\%_]/g, (c) => `\\${c}`)).join("/")

/**
 * Claims `clientId` for a persistent session of `principal`, or finds it held: returns the
 * principal that holds it (this one unless another got there first).
 */
export const claimSession = (sql: SqlClient, clientId: string, principal: string): Effect.Effect<string, SqlError> =>
  sql.query<{ principal: string }>(
    `INSERT INTO mqtt_sessions AS s (client_id, principal, created_at) VALUES ($1, $2, ${NOW_MS})
     ON CONFLICT (client_id) DO UPDATE SET principal = s.principal
     RETURNING principal`,
    [clientId, principal]
  ).pipe(Effect.map((rows) => rows[0]?.principal ?? principal))

/** The principal holding a stored session under `clientId`, if there is one. */
export const sessionHolder = (sql: SqlClient, clientId: string): Effect.Effect<string | undefined, SqlError> =>
  sql.query<{ principal: string }>("SELECT principal FROM mqtt_sessions WHERE client_id = $1", [clientId]).pipe(
    Effect.map((rows) => rows[0]?.principal)
  )

/** Ends a stored session: its subscriptions and deliveries go with it (a clean CONNECT). */
export const forgetSession = (sql: SqlClient, clientId: string): Effect.Effect<void, SqlError> =>
  Effect.asVoid(sql.query("DELETE FROM mqtt_sessions WHERE client_id = $1", [clientId]))

/**
 * Adds or updates subscriptions of `principal`'s session, which is stored again if a clean
 * CONNECT elsewhere ended it meanwhile (and left alone if another principal took the id).
 */
export const saveSubscriptions = (
  sql: SqlClient,
  clientId: string,
  principal: string,
  subscriptions: ReadonlyArray<StoredSubscription>
): Effect.Effect<void, SqlError> =>
  sql.transaction((tx) =>
    Effect.andThen(
      tx.query(
        `INSERT INTO mqtt_sessions (client_id, principal, created_at) VALUES ($1, $2, ${NOW_MS}) ON CONFLICT (client_id) DO NOTHING`,
        [clientId, principal]
      ),
      tx.query(
        `INSERT INTO mqtt_subscriptions (client_id, topic, device_id, pattern, qos)
         SELECT $1, u.topic, u.device_id, u.pattern, u.qos FROM unnest($2::text[], $3::text[], $4::text[], $5::int2[]) AS u(topic, device_id, pattern, qos)
         WHERE EXISTS (SELECT 1 FROM mqtt_sessions WHERE client_id = $1 AND principal = $6)
         ON CONFLICT (client_id, topic) DO UPDATE SET qos = EXCLUDED.qos`,
        [
          clientId,
          subscriptions.map((s) => s.topic),
          subscriptions.map((s) => s.deviceId),
          subscriptions.map((s) => likePattern(s.topic)),
          subscriptions.map((s) => s.qos),
          principal
        ]
      )
    )
  ).pipe(Effect.asVoid)

export const removeSubscriptions = (sql: SqlClient, clientId: string, topics: ReadonlyArray<string>): Effect.Effect<void, SqlError> =>
  Effect.asVoid(sql.query("DELETE FROM mqtt_subscriptions WHERE client_id = $1 AND topic = ANY($2::text[])", [clientId, topics]))

export const subscriptionsOf = (sql: SqlClient, clientId: string): Effect.Effect<Array<{ topic: string; qos: number }>, SqlError> =>
  sql.query<{ topic: string; qos: number }>("SELECT topic, qos FROM mqtt_subscriptions WHERE client_id = $1 ORDER BY topic", [clientId])

/** Client ids with a subscription matching `topic` (any QoS). */
export const subscribersOf = (sql: SqlClient, deviceId: string, topic: string): Effect.Effect<Array<string>, SqlError> =>
  sql.query<{ client_id: string }>(
    "SELECT DISTINCT client_id FROM mqtt_subscriptions WHERE device_id = $1 AND $2 LIKE pattern ESCAPE '\\' ORDER BY client_id",
    [deviceId, topic]
  ).pipe(Effect.map((rows) => rows.map((r) => r.client_id)))

/** Devices some persistent session receives QoS 1 deliveries of. */
export const watchedDevices = (sql: SqlClient): Effect.Effect<Array<string>, SqlError> =>
  sql.query<{ device_id: string }>("SELECT DISTINCT device_id FROM mqtt_subscriptions WHERE qos > 0").pipe(
    Effect.map((rows) => rows.map((r) => r.device_id))
  )

/**
 * Queues a delivery for every stored session whose subscriptions match it, at most `limit`
 * unacknowledged per client id, in one statement. A copy of a delivery already queued (or
 * acknowledged) for a client id is ignored. Returns the client ids whose queue was full.
 * With several processes queuing at once the bound may be passed by a few.
 */
export const enqueueDelivery = (
  sql: SqlClient,
  delivery: { readonly deviceId: string; readonly topic: string; readonly payload: string; readonly key: string },
  limit: number
): Effect.Effect<Array<string>, SqlError> =>
  sql.query<{ client_id: string }>(
    `WITH targets AS (
       SELECT s.client_id,
         (SELECT count(*) FROM mqtt_outgoing o WHERE o.client_id = s.client_id AND o.acked_at IS NULL) AS queued,
         EXISTS (SELECT 1 FROM mqtt_outgoing o WHERE o.client_id = s.client_id AND o.message_key = $3) AS known
       FROM mqtt_subscriptions s
       WHERE s.device_id = $1 AND s.qos > 0 AND $2 LIKE s.pattern ESCAPE '\\'
       GROUP BY s.client_id
     ), queued AS (
       INSERT INTO mqtt_outgoing (client_id, message_key, topic, payload, qos)
       SELECT client_id, $3, $2, $4, 1 FROM targets WHERE NOT known AND queued < $5
       ON CONFLICT (client_id, message_key) DO NOTHING
     )
     SELECT client_id FROM targets WHERE NOT known AND queued >= $5`,
    [delivery.deviceId, delivery.topic, delivery.key, delivery.payload, limit]
  ).pipe(Effect.map((rows) => rows.map((r) => r.client_id)))

/** Queues a delivery for the given client ids (aedes's own enqueue), within the same bound. */
export const enqueueFor = (
  sql: SqlClient,
  clientIds: ReadonlyArray<string>,
  delivery: { readonly topic: string; readonly payload: string; readonly key: string; readonly qos: number },
  limit: number
): Effect.Effect<Array<string>, SqlError> =>
  sql.query<{ client_id: string }>(
    `WITH targets AS (
       SELECT s.client_id,
         (SELECT count(*) FROM mqtt_outgoing o WHERE o.client_id = s.client_id AND o.acked_at IS NULL) AS queued,
         EXISTS (SELECT 1 FROM mqtt_outgoing o WHERE o.client_id = s.client_id AND o.message_key = $2) AS known
       FROM mqtt_sessions s WHERE s.client_id = ANY($1::text[])
     ), queued AS (
       INSERT INTO mqtt_outgoing (client_id, message_key, topic, payload, qos)
       SELECT client_id, $2, $3, $4, $5 FROM targets WHERE NOT known AND queued < $6
       ON CONFLICT (client_id, message_key) DO NOTHING
     )
     SELECT client_id FROM targets WHERE NOT known AND queued >= $6`,
    [clientIds, delivery.key, delivery.topic, delivery.payload, delivery.qos, limit]
  ).pipe(Effect.map((rows) => rows.map((r) => r.client_id)))

/**
 * Records the packet identifier a queued delivery was sent with. An older delivery still
 * holding that identifier (after the 16-bit counter wrapped) gives it up.
 */
export const markSent = (sql: SqlClient, clientId: string, key: string, messageId: number): Effect.Effect<void, SqlError> =>
  sql.query(
    `WITH released AS (
       UPDATE mqtt_outgoing SET message_id = NULL
       WHERE client_id = $1 AND message_id = $3 AND message_key <> $2 AND acked_at IS NULL
     )
     UPDATE mqtt_outgoing SET message_id = $3 WHERE client_id = $1 AND message_key = $2 AND acked_at IS NULL`,
    [clientId, key, messageId]
  ).pipe(Effect.asVoid)

/** A PUBACK: the delivery sent with `messageId` is done. Returns it, if one was waiting. */
export const acknowledge = (sql: SqlClient, clientId: string, messageId: number): Effect.Effect<QueuedDelivery | undefined, SqlError> =>
  sql.query<{ topic: string; payload: string; qos: number }>(
    `UPDATE mqtt_outgoing SET acked_at = ${NOW_MS}, message_id = NULL
     WHERE client_id = $1 AND message_id = $2 AND acked_at IS NULL
     RETURNING topic, payload, qos`,
    [clientId, messageId]
  ).pipe(Effect.map(([row]) => row === undefined ? undefined : { ...row, messageId }))

/** What waits for `clientId`, oldest first. */
export const queuedFor = (sql: SqlClient, clientId: string): Effect.Effect<Array<QueuedDelivery>, SqlError> =>
  sql.query<{ topic: string; payload: string; qos: number; message_id: number | null }>(
    "SELECT topic, payload, qos, message_id FROM mqtt_outgoing WHERE client_id = $1 AND acked_at IS NULL ORDER BY seq",
    [clientId]
  ).pipe(Effect.map((rows) => rows.map((r) => ({ topic: r.topic, payload: r.payload, qos: r.qos, messageId: r.message_id ?? undefined }))))

/** Forgets deliveries acknowledged more than `ACKNOWLEDGED_KEPT_MS` ago. */
export const sweepAcknowledged = (sql: SqlClient): Effect.Effect<void, SqlError> =>
  Effect.asVoid(sql.query(`DELETE FROM mqtt_outgoing WHERE acked_at IS NOT NULL AND acked_at < ${NOW_MS} - $1::bigint`, [ACKNOWLEDGED_KEPT_MS]))
