import { z } from "@hono/zod-openapi"
import { Effect } from "effect"
import { Auth } from "../../../auth/Auth.ts"
import { Ingest } from "../../../ingest/Ingest.ts"
import { hashSecret } from "../../../auth/secrets.ts"
import { NotFound } from "../../../domain/errors.ts"
import { newSecret } from "../../../domain/ids.ts"
import { getOne, insertRow } from "../../../store/crud.ts"
import { type DeviceJson, deviceQuery, devicesTable } from "../../../store/devices.ts"
import { DeviceOwners } from "../../../entities/DeviceOwners.ts"
import { gatewayQuery, gatewaysTable } from "../../../store/gateways.ts"
import { placeQuery, placesTable } from "../../../store/places.ts"
import { productQuery, productsTable } from "../../../store/products.ts"
import { type SpaceJson, spaceQuery, spacesTable } from "../../../store/spaces.ts"
import { Sql } from "../../../store/Sql.ts"
import { idParams } from "../params.ts"
import { type Api, JsonText } from "../route.ts"
import { DeviceReads } from "../../../store/DeviceReads.ts"
import { liveOfSpaces, presentSpaces, type SpaceCounts, spacesOfDevice, spacesWithOpenAlerts } from "../../../entities/spaceReads.ts"
import { devicesChanged } from "./resources.ts"
import {
  createDeviceBody,
  createGatewayBody,
  createPlaceBody,
  createProductBody,
  createSpaceBody,
  deviceSchema,
  deviceWithSecretSchema,
  gatewaySchema,
  placeSchema,
  productSchema,
  spaceSchema,
  updateDeviceBody,
  updateGatewayBody,
  updatePlaceBody,
  updateProductBody,
  updateSpaceBody
} from "../schemas.ts"
import { registerResource } from "./resources.ts"

const forgetCredentials = Auth.use((auth) => auth.forget())
/**
 * One device as JSON text: its cached read (the same object while cached, so its head is
 * stringified once) and its live fields, from its owner or the stored row kept with it.
 */
const readDevice = Effect.fnUntraced(function*(organisationId: string, id: string) {
  const device = yield* DeviceReads.use((reads) => reads.read(organisationId, id))
  const [live] = yield* DeviceOwners.use((owners) => owners.liveOf([device]))
  return new JsonText(`${deviceHead(device)},"lastSeenAt":${live.lastSeenAt},"live":${JSON.stringify(live.live)}}`)
})
/**
 * A device's JSON without its live fields and the closing brace, memoised per device read: a
 * cached page answers the same objects again, so each is stringified once, not per request.
 * `lastSeenAt` and `live` follow it, as `withLive` sets them.
 */
const heads = new WeakMap<object, string>()
const deviceHead = (device: DeviceJson & { readonly stored?: unknown }): string => {
  const known = heads.get(device)
  if (known !== undefined) return known
  const { stored: _, lastSeenAt: __, ...rest } = device
  const head = JSON.stringify(rest).slice(0, -1)
  heads.set(device, head)
  return head
}
/**
 * A space's JSON around its live counts, memoised per space read as `heads` is: what precedes
 * `live` (the stored fields up to `updatedAt`) and what follows it (`alertUsers`, the closing brace).
 */
const spaceParts = new WeakMap<object, readonly [string, string]>()
const spaceText = (space: SpaceJson, live: SpaceCounts): string => {
  let parts = spaceParts.get(space)
  if (parts === undefined) {
    const { alertUsers, live: _, ...rest } = space
    parts = [JSON.stringify(rest).slice(0, -1), alertUsers === undefined ? "}" : `,"alertUsers":${JSON.stringify(alertUsers)}}`]
    spaceParts.set(space, parts)
  }
  return `${parts[0]},"live":{"devicesOnline":${live.devicesOnline},"devicesOffline":${live.devicesOffline},"openAlerts":${live.openAlerts}}${parts[1]}`
}
/** No device's sign of life changes a page of spaces (their live counts are read per answer). */
const noDevices = (): ReadonlyArray<string> => []

const withLive = (devices: ReadonlyArray<DeviceJson>) => DeviceOwners.use((owners) => owners.withLive(devices))
const forgetDevice = Effect.andThen(forgetCredentials, Ingest.use((ingest) => Effect.sync(() => ingest.forgetDevices())))
/**
 * A space or product deleted leaves its devices without one (`ON DELETE SET NULL`): their owners
 * take the rules of their new place, as for a device moved (rare: every device of the organisation
 * held in memory reads its place again).
 */
const placesGone = (organisationId: string) => DeviceOwners.use((owners) => owners.rulesChanged(organisationId))

/** Spaces, devices, products, places and gateways. */
export const registryRoutes = (api: Api): void => {
  api.route({
    method: "get",
    path: "/devices/me",
    tag: "Devices",
    summary: "The device of the calling device key",
    access: "device",
    response: deviceSchema,
    handler: ({ principal }) => readDevice(principal.organisationId, principal.id)
  })

  api.route({
    method: "post",
    path: "/devices/:id/secretKey",
    tag: "Devices",
    summary: "Rotate a device secret key",
    description: "The old key stops working at once; the new one is shown only in this response.",
    access: "write",
    params: idParams,
    response: z.object({ id: z.string(), secretKey: z.string() }),
    handle: function*({ principal, params }) {
      const sql = yield* Sql
      const secretKey = newSecret("d_sk")
      const rows = yield* sql.query(
        "UPDATE devices SET secret_hash = $3, updated_at = $4 WHERE id = $1 AND organisation_id = $2 RETURNING id",
        [params.id, principal.organisationId, hashSecret(secretKey), Date.now()]
      )
      if (rows.length === 0) return yield* new NotFound({ resource: "device", id: params.id })
      yield* forgetCredentials
      yield* devicesChanged(principal.organisationId)
      return { id: params.id, secretKey }
    }
  })

  registerResource(api, {
    path: "/devices",
    tag: "Devices",
    plural: undefined,
    table: devicesTable,
    query: deviceQuery,
    schema: deviceSchema,
    createBody: createDeviceBody,
    updateBody: updateDeviceBody,
    filters: {
      "space.id": "space_id",
      "place.id": "place_id",
      "gateway.id": "gateway_id",
      "product.id": "product_id",
      "organisation.id": "organisation_id"
    },
    search: { columns: ["name", "custom_id"], description: "devices whose name or customId contains this text, in any case" },
    create: {
      response: deviceWithSecretSchema,
      handler: Effect.fnUntraced(function*(organisationId: string, body: Record<string, unknown>) {
        const sql = yield* Sql
        const secretKey = newSecret("d_sk")
        // One device more: the create route drops the organisation's cached pages (`cachedList`).
        const id = yield* insertRow(sql, devicesTable, organisationId, body, { secret_hash: hashSecret(secretKey) })
        const [device] = yield* withLive([yield* getOne(sql, deviceQuery, organisationId, id)])
        return { ...device, secretKey }
      })
    },
    readOne: readDevice,
    renderList: (page) =>
      DeviceOwners.use((owners) => owners.liveOf(page.items)).pipe(
        Effect.map((lives) =>
          new JsonText(
            `[${page.items.map((device, i) => `${deviceHead(device)},"lastSeenAt":${lives[i].lastSeenAt},"live":${JSON.stringify(lives[i].live)}}`).join(",")}]`,
            { "X-Total-Count": String(page.total) }
          )
        )
      ),
    cachedList: (organisationId, key, order, load) =>
      DeviceReads.use((reads) =>
        reads.page(organisationId, `devices ${key}`, { devices: (page) => page.items.map((d) => d.id), anySign: order === "lastSeenAt" }, load)
      ),
    present: withLive,
    // Moved: its owner takes the rules of its new space or product (offline timers included).
    afterUpdate: (organisationId, id, body) =>
      body.space === undefined && body.product === undefined ? Effect.void : DeviceOwners.use((owners) => owners.deviceMoved(organisationId, id)),
    afterDelete: () => forgetDevice,
    // A device created, moved to another space or deleted takes its liveness and open alerts along.
    spacesOf: spacesOfDevice
  })

  registerResource(api, {
    path: "/spaces",
    tag: "Spaces",
    plural: "spaces",
    table: spacesTable,
    query: spaceQuery,
    schema: spaceSchema,
    createBody: createSpaceBody,
    updateBody: updateSpaceBody,
    filters: { country: "country" },
    listAccess: "directory",
    // A page keeps the stored spaces; any write to a space or its alert recipients drops the
    // organisation's pages (`devicesChanged`). The live counts come from the entities per answer.
    cachedList: (organisationId, key, _order, load) =>
      DeviceReads.use((reads) => reads.page(organisationId, `spaces ${key}`, { devices: noDevices, anySign: false }, load)),
    renderList: (page) =>
      Effect.map(liveOfSpaces(page.items.map((space) => space.id)), (lives) =>
        new JsonText(
          `{"spaces":[${page.items.map((space, i) => spaceText(space, lives[i])).join(",")}],"count":${page.total}}`,
          { "X-Total-Count": String(page.total) }
        )),
    // Its timezone (the entity holds it) changed, or it was deleted.
    spacesOf: (_sql, _organisationId, id) => Effect.succeed([id]),
    afterDelete: placesGone,
    present: presentSpaces
  })

  registerResource(api, {
    path: "/products",
    tag: "Products",
    plural: "products",
    table: productsTable,
    query: productQuery,
    schema: productSchema,
    createBody: createProductBody,
    updateBody: updateProductBody,
    // Deleting a product deletes its rules and their alerts.
    spacesOf: (sql, organisationId, id) => spacesWithOpenAlerts(sql, organisationId, { productId: id }),
    afterDelete: placesGone
  })

  registerResource(api, {
    path: "/places",
    tag: "Places",
    plural: "places",
    table: placesTable,
    query: placeQuery,
    schema: placeSchema,
    createBody: createPlaceBody,
    updateBody: updatePlaceBody,
    filters: { "space.id": "space_id" }
  })

  registerResource(api, {
    path: "/gateways",
    tag: "Gateways",
    plural: "gateways",
    table: gatewaysTable,
    query: gatewayQuery,
    schema: gatewaySchema,
    createBody: createGatewayBody,
    updateBody: updateGatewayBody,
    filters: { "product.id": "product_id" }
  })
}
