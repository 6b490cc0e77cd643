import { Context, Effect, Layer } from "effect"
import { Bus } from "../bus/Bus.ts"
import type { NotFound } from "../domain/errors.ts"
import { getOne, type Page } from "./crud.ts"
import { type DeviceRead, deviceQuery } from "./devices.ts"
import { Sql, type SqlError } from "./Sql.ts"

/**
 * `GET /devices/{id}` and `GET /devices/me` are the hottest reads of the API (dashboards and
 * devices poll them). They are answered from a read-through cache of the device's JSON text,
 * kept correct by invalidation rather than by time:
 *
 * - every delivery on the bus (an event or location of the device was stored, so its
 *   `lastSeenAt` moved) drops that device, in every process, and so does a `devices.seen`
 *   notice (a sign of life of an MQTT session was stored: src/entities/SeenSender.ts);
 * - every write to a device, space, product, place or gateway of an organisation drops that
 *   organisation's devices, here and, through a bus control message, in every other process;
 * - a device leaving its owner's memory (`left`) drops it: its machine's row, kept with the
 *   device (what answers its live fields while no owner holds it), was written on leaving;
 * - a read that raced an invalidation does not store what it read (a placeholder marks the
 *   read; an invalidation removes it, so the late answer finds it gone).
 *
 * The TTL only bounds what a lost cross-process message (the NATS bus is at-most-once) could
 * leave stale. A miss or an unknown id is never cached.
 *
 * Pages of `GET /devices` and `GET /events` are cached the same way, keyed by organisation and
 * query; a device page with the machine's stored row of each device (what answers its live
 * fields while no owner holds it). A page holds devices: a device page its own, an events page
 * the device it lists (none for an organisation's events):
 *
 * - a device created (through the API or by an ingest naming a new `customId`), changed or
 *   deleted drops its organisation's pages, as above;
 * - a delivery or sign of life drops the pages holding that device, and every page any sign of
 *   life of the organisation may change (devices ordered by `lastSeenAt`, an organisation's events);
 * - a device leaving its owner's memory drops the pages holding it (`left`): its row, written on
 *   the way out, is what answers for it from then on; while an owner holds it the owner answers;
 * - a page read while anything was dropped is not stored (an epoch counts the drops).
 *
 * Pages of `GET /spaces` keep the stored spaces (their live counts are asked of the entities per
 * answer): a write to a space or to its alert recipients, and a member removed (taking its
 * subscriptions along), drop the organisation's pages as a device write does. Nothing else
 * changes what they show: users and organisations are not renamed. A rename added later must
 * call `changed` for every organisation of the user.
 */
const TTL_MS = 30_000
const MAX_ENTRIES = 50_000
/** Items of cached pages, in all (a device ~2 KB, an event less): the oldest pages go first past it. */
const MAX_PAGE_ITEMS = 20_000

/** The last level of an alert topic (`devices/{id}/alerts`), and what the topic has besides the id. */
const ALERTS_SUFFIX = "/alerts"
const ALERT_TOPIC_EXTRA = "devices/".length + ALERTS_SUFFIX.length

interface Entry {
  readonly organisationId: string
  /** The device as read, with its machine's stored row; undefined while its read is in flight. */
  readonly device: DeviceRead | undefined
  readonly until: number
}

export interface DeviceReadsService {
  /**
   * The device as read, with its machine's stored row, from the cache or the store (the same
   * object while cached: answers memoise their text on it); another organisation's id is NotFound.
   */
  read(organisationId: string, id: string): Effect.Effect<DeviceRead, NotFound | SqlError>
  /**
   * A page of a list from the cache, or from `load` (then kept, unless something was dropped
   * meanwhile). `key` names the list, the organisation and the whole query.
   */
  page<T, E, R>(
    organisationId: string,
    key: string,
    holds: PageHolds<T>,
    load: Effect.Effect<Page<T>, E, R>
  ): Effect.Effect<Page<T>, E, R>
  /**
   * Something an organisation's devices or spaces show changed, or it has a device more: drop
   * its entries and pages in every process.
   */
  changed(organisationId: string): Effect.Effect<void>
  /** These devices left their owner's memory, their rows written: drop the pages holding them, in every process. */
  left(deviceIds: ReadonlyArray<string>): Effect.Effect<void>
  /** Alerts of these organisations were written: drop their pages of alerts, here at once and in every process. */
  alertsChanged(organisationIds: ReadonlyArray<string>): Effect.Effect<void>
  /** Entries held now (tests, metrics). */
  readonly size: () => number
  /** Pages held now (tests). */
  readonly pages: () => number
}

/** Which devices' signs of life change a page. */
export interface PageHolds<T> {
  /** The devices it holds. */
  readonly devices: (page: Page<T>) => ReadonlyArray<string>
  /** Any sign of life of the organisation may change it (devices ordered by `lastSeenAt`, an organisation's events). */
  readonly anySign: boolean
  /**
   * A page of alerts: dropped by every alert delivered for the organisation (each alert an
   * alert bucket writes for a device is delivered), `alerts.changed` (what is written without a
   * delivery) and `rules.changed` (an alert embeds its rule), besides what drops every page.
   */
  readonly alerts?: boolean
}

interface PageEntry {
  readonly organisationId: string
  /** As `load` read it (devices: `DeviceRead`, with their stored rows); the key names what it is. */
  readonly page: Page<unknown>
  readonly devices: ReadonlyArray<string>
  readonly anySign: boolean
  readonly alerts: boolean
  readonly until: number
}

export class DeviceReads extends Context.Service<DeviceReads, DeviceReadsService>()("voltaic/store/DeviceReads") {
  static readonly layer = Layer.effect(
    DeviceReads,
    Effect.gen(function*() {
      const sql = yield* Sql
      const bus = yield* Bus
      const entries = new Map<string, Entry>()

      const pages = new Map<string, PageEntry>()
      /** Device id → keys of the cached pages holding it. */
      const pagesOf = new Map<string, Set<string>>()
      /** Organisation → keys of its cached pages, and of those any sign of life changes (a delivery reaches these without a scan). */
      const pagesOfOrganisation = new Map<string, Set<string>>()
      const anySignPages = new Map<string, Set<string>>()
      /** Organisation → keys of its cached pages of alerts. */
      const alertPages = new Map<string, Set<string>>()
      const index = (map: Map<string, Set<string>>, id: string, key: string) => {
        const keys = map.get(id)
        if (keys === undefined) map.set(id, new Set([key]))
        else keys.add(key)
      }
      const unindex = (map: Map<string, Set<string>>, id: string, key: string) => {
        const keys = map.get(id)
        if (keys === undefined) return
        keys.delete(key)
        if (keys.size === 0) map.delete(id)
      }
      let pageItems = 0
      /** Counts what was dropped: a page read across a drop is not kept. */
      let epoch = 0

      const dropPage = (key: string) => {
        const entry = pages.get(key)
        if (entry === undefined) return
        pages.delete(key)
        pageItems -= entry.page.items.length
        for (const id of entry.devices) unindex(pagesOf, id, key)
        unindex(pagesOfOrganisation, entry.organisationId, key)
        if (entry.anySign) unindex(anySignPages, entry.organisationId, key)
        if (entry.alerts) unindex(alertPages, entry.organisationId, key)
      }
      /** Drops the pages under `id` in `map` (copied first: dropping edits the set); every drop counts in the epoch. */
      const dropIndexed = (map: Map<string, Set<string>>, id: string) => {
        epoch++
        const keys = map.get(id)
        if (keys !== undefined) for (const key of [...keys]) dropPage(key)
      }
      const dropPagesHolding = (deviceIds: ReadonlyArray<string>) => {
        for (const id of deviceIds) dropIndexed(pagesOf, id)
      }
      const dropOrganisation = (organisationId: string) => {
        for (const [id, entry] of entries) if (entry.organisationId === organisationId) entries.delete(id)
        dropIndexed(pagesOfOrganisation, organisationId)
      }
      /** A device's `lastSeenAt` moved: its entry and pages, and its organisation's pages any sign of life changes. */
      const seen = (deviceId: string, organisationId: string) => {
        entries.delete(deviceId)
        dropIndexed(pagesOf, deviceId)
        dropIndexed(anySignPages, organisationId)
      }
      yield* bus.onDelivery((delivery) => {
        seen(delivery.deviceId, delivery.organisationId)
        // `devices/{id}/alerts`, and not an event named "alerts" (`devices/{id}/events/alerts`).
        if (delivery.topic.length === delivery.deviceId.length + ALERT_TOPIC_EXTRA && delivery.topic.endsWith(ALERTS_SUFFIX)) {
          dropIndexed(alertPages, delivery.organisationId)
        }
      })
      yield* bus.onControl((message) => {
        if (message.type === "devices.changed") dropOrganisation(message.organisationId)
        else if (message.type === "devices.seen") {
          // The notice names no organisation: every organisation's any-sign pages go.
          for (const id of message.deviceIds) entries.delete(id)
          dropPagesHolding(message.deviceIds)
          for (const organisationId of [...anySignPages.keys()]) dropIndexed(anySignPages, organisationId)
        } else if (message.type === "devices.left") {
          for (const id of message.deviceIds) entries.delete(id)
          dropPagesHolding(message.deviceIds)
        }
        else if (message.type === "alerts.changed") for (const id of message.organisationIds) dropIndexed(alertPages, id)
        else if (message.type === "rules.changed") dropIndexed(alertPages, message.organisationId)
      })

      const evict = () => {
        // Insertion order: the oldest tenth goes (bounded memory without LRU bookkeeping per hit).
        let excess = entries.size - MAX_ENTRIES + Math.ceil(MAX_ENTRIES / 10)
        for (const id of entries.keys()) {
          if (excess-- <= 0) break
          entries.delete(id)
        }
      }

      const read = (organisationId: string, id: string): Effect.Effect<DeviceRead, NotFound | SqlError> =>
        Effect.suspend(() => {
          const now = Date.now()
          const found = entries.get(id)
          if (found !== undefined && found.device !== undefined && found.until > now && found.organisationId === organisationId) {
            return Effect.succeed(found.device)
          }
          const mark: Entry = { organisationId, device: undefined, until: now + TTL_MS }
          if (found === undefined || found.device !== undefined) {
            if (entries.size >= MAX_ENTRIES) evict()
            entries.set(id, mark)
          }
          return getOne(sql, deviceQuery, organisationId, id).pipe(
            Effect.tap((device) => Effect.sync(() => {
              if (entries.get(id) === mark) entries.set(id, { organisationId, device, until: mark.until })
            })),
            Effect.tapError(() => Effect.sync(() => entries.get(id) === mark && entries.delete(id)))
          )
        })

      const keep = (key: string, entry: PageEntry) => {
        dropPage(key)
        pages.set(key, entry)
        pageItems += entry.page.items.length
        for (const id of entry.devices) index(pagesOf, id, key)
        index(pagesOfOrganisation, entry.organisationId, key)
        if (entry.anySign) index(anySignPages, entry.organisationId, key)
        if (entry.alerts) index(alertPages, entry.organisationId, key)
        // Insertion order: the oldest pages go until the rest fit.
        for (const oldest of pages.keys()) {
          if (pageItems <= MAX_PAGE_ITEMS || oldest === key) break
          dropPage(oldest)
        }
      }

      const page = <T, E, R>(
        organisationId: string,
        key: string,
        holds: PageHolds<T>,
        load: Effect.Effect<Page<T>, E, R>
      ): Effect.Effect<Page<T>, E, R> =>
        Effect.suspend(() => {
          const now = Date.now()
          const found = pages.get(key)
          // The key names the query, and one query is always read by the same resource's list.
          if (found !== undefined && found.until > now) return Effect.succeed(found.page as Page<T>)
          const started = epoch
          return Effect.tap(load, (loaded) =>
            Effect.sync(() => {
              if (epoch !== started) return
              keep(key, {
                organisationId,
                page: loaded,
                devices: holds.devices(loaded),
                anySign: holds.anySign,
                alerts: holds.alerts === true,
                until: now + TTL_MS
              })
            }))
        })

      return DeviceReads.of({
        read,
        page,
        changed: (organisationId) =>
          Effect.andThen(
            Effect.sync(() => dropOrganisation(organisationId)),
            bus.control({ type: "devices.changed", organisationId })
          ),
        left: (deviceIds) =>
          deviceIds.length === 0 ? Effect.void : Effect.andThen(
            Effect.sync(() => {
              for (const id of deviceIds) entries.delete(id)
              dropPagesHolding(deviceIds)
            }),
            bus.control({ type: "devices.left", deviceIds })
          ),
        alertsChanged: (organisationIds) =>
          organisationIds.length === 0 ? Effect.void : Effect.andThen(
            Effect.sync(() => {
              for (const id of organisationIds) dropIndexed(alertPages, id)
            }),
            bus.control({ type: "alerts.changed", organisationIds })
          ),
        size: () => entries.size,
        pages: () => pages.size
      })
    })
  )
}
