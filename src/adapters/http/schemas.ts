import { z } from "@hono/zod-openapi"
import { refSchema } from "./params.ts"

/** Request and response shapes of the resource API; the OpenAPI document is generated from these. */

const jsonObject = z.record(z.string(), z.unknown())
const epochMs = z.number().int().openapi({ description: "epoch milliseconds, UTC" })
const shortText = z.string().max(1000)

export const isIanaTimeZone = (zone: string): boolean => {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: zone })
    return true
  } catch {
    return false
  }
}

/** Booleans also arrive as "true"/"false" from form-encoded bodies. */
const bool = z.union([z.boolean(), z.enum(["true", "false"]).transform((v) => v === "true")])

const timezone = z.string().refine(isIanaTimeZone, { message: "must be an IANA time zone name such as Europe/Dublin" })
const country = z.string().regex(/^[A-Z]{3}$/, { message: "must be an ISO 3166 alpha-3 code such as IRL" })

export const organisationRef = z.object({ id: z.string(), name: z.string() })

// Spaces
const avatar = z.object({ default: z.string().optional(), url: z.string().optional(), thumbnail: z.string().optional() })
export const spaceSchema = z.object({
  id: z.string(),
  clientId: z.string().nullable(),
  name: z.string(),
  isPublic: z.boolean(),
  disabled: z.boolean(),
  avatar: avatar.nullable(),
  owner: z.object({ organisation: organisationRef }),
  timezone: z.string(),
  country: z.string().nullable(),
  live: z.object({ devicesOnline: z.number().int(), devicesOffline: z.number().int(), openAlerts: z.number().int() }).optional(),
  alertUsers: z.array(z.object({ id: z.string(), fullName: z.string(), emailAddress: z.string() })).optional(),
  createdAt: epochMs,
  updatedAt: epochMs
}).openapi("Space")

const spaceFields = {
  clientId: shortText.nullable().optional(),
  isPublic: bool.optional(),
  disabled: bool.optional(),
  avatar: avatar.nullable().optional(),
  timezone: timezone.optional(),
  country: country.nullable().optional()
}
export const createSpaceBody = z.object({ name: z.string().min(1).max(200), ...spaceFields })
export const updateSpaceBody = z.object({ name: z.string().min(1).max(200).optional(), ...spaceFields })

// Products
export const productSchema = z.object({
  id: z.string(),
  name: z.string(),
  description: z.string().nullable(),
  manufacturer: z.string().nullable(),
  model: z.string().nullable(),
  category: z.string().nullable(),
  image: z.string().nullable(),
  colour: z.string().nullable().openapi({ description: "hex colour, e.g. #1a2b3c" }),
  state: jsonObject.nullable(),
  createdAt: epochMs,
  updatedAt: epochMs
}).openapi("Product")

const productFields = {
  description: shortText.nullable().optional(),
  manufacturer: shortText.nullable().optional(),
  model: shortText.nullable().optional(),
  category: shortText.nullable().optional(),
  image: z.string().max(2048).nullable().optional(),
  colour: z.string().regex(/^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$/, { message: "must be a hex colour such as #1a2b3c" })
    .nullable().optional(),
  state: jsonObject.nullable().optional()
}
export const createProductBody = z.object({ name: z.string().min(1).max(200), ...productFields })
export const updateProductBody = z.object({ name: z.string().min(1).max(200).optional(), ...productFields })

// Places
const placeConfig = z.object({
  capacity: z.number().int().optional(),
  squareMeters: z.number().int().optional(),
  maxAllowableHeadcount: z.number().int().optional(),
  currentAllocatedHeadcount: z.number().int().optional()
}).catchall(z.unknown())
export const placeSchema = z.object({
  id: z.string(),
  name: z.string(),
  state: jsonObject.nullable(),
  config: jsonObject.nullable(),
  space: refSchema.nullable(),
  createdAt: epochMs,
  updatedAt: epochMs
}).openapi("Place")
const placeFields = { state: jsonObject.nullable().optional(), config: placeConfig.nullable().optional(), space: refSchema.nullable().optional() }
export const createPlaceBody = z.object({ name: z.string().min(1).max(200), ...placeFields })
export const updatePlaceBody = z.object({ name: z.string().min(1).max(200).optional(), ...placeFields })

// Gateways
export const gatewaySchema = z.object({
  id: z.string(),
  serialNumber: z.string().nullable(),
  name: z.string(),
  product: refSchema.nullable(),
  isOnline: z.boolean(),
  lora: z.object({ gatewayId: z.string().optional() }).nullable(),
  lastSeenAt: epochMs.nullable(),
  createdAt: epochMs,
  updatedAt: epochMs
}).openapi("Gateway")
const gatewayFields = {
  serialNumber: shortText.nullable().optional(),
  product: refSchema.nullable().optional(),
  isOnline: bool.optional(),
  lora: z.object({ gatewayId: z.string().max(200).optional() }).nullable().optional()
}
export const createGatewayBody = z.object({ name: z.string().min(1).max(200), ...gatewayFields })
export const updateGatewayBody = z.object({ name: z.string().min(1).max(200).optional(), ...gatewayFields })

// Devices
const rssi = z.number().int()
const wifi = z.object({ macAddress: z.string().optional(), rssi: rssi.optional() })
const cellular = z.object({ network: z.string().optional(), rssi: rssi.optional(), imei: z.string().optional(), iccid: z.string().optional() })
const bluetooth = z.object({ macAddress: z.string().optional(), rssi: rssi.optional() })
const lora = z.object({ devEui: z.string().optional(), devAddr: z.string().optional(), appEui: z.string().optional(), appKey: z.string().optional() })
const sigfox = z.object({ id: z.string().optional() })

export const deviceSchema = z.object({
  id: z.string().openapi({ example: "dev_01jx…" }),
  isMain: z.boolean(),
  isActive: z.boolean(),
  name: z.string(),
  customId: z.string().nullable(),
  serialNumber: z.string().nullable(),
  batchNumber: z.string().nullable(),
  space: spaceSchema.nullable(),
  product: productSchema.nullable(),
  place: refSchema.nullable(),
  gateway: refSchema.nullable(),
  organisation: organisationRef,
  events: z.array(z.unknown()).openapi({ description: "The device's latest event (as GET /events answers it), or none" }),
  location: z.unknown().nullable().openapi({ description: "The device's latest location (as GET /locations answers it), or null" }),
  state: jsonObject.nullable(),
  meta: jsonObject.nullable(),
  wifi: wifi.nullable(),
  cellular: cellular.nullable(),
  bluetooth: bluetooth.nullable(),
  lora: lora.nullable(),
  sigfox: sigfox.nullable(),
  lastSeenAt: epochMs.nullable(),
  live: z.object({
    isOnline: z.boolean(),
    state: z.enum(["unknown", "online", "offline", "unwatched"]).openapi({
      description: "unknown: never seen; unwatched: no offline alert rule applies to the device"
    }),
    lastSeenAt: epochMs.nullable()
  }).openapi("DeviceLive", { description: "Live fields, from the process that owns the device" }),
  lastUnprocessedEventTimestamp: epochMs.nullable(),
  lastProcessedEventTimestamp: epochMs.nullable(),
  createdAt: epochMs,
  updatedAt: epochMs
}).openapi("Device")

export const deviceWithSecretSchema = deviceSchema.extend({
  secretKey: z.string().openapi({ description: "device secret key d_sk_…, shown only here" })
}).openapi("DeviceWithSecret")

const deviceFields = {
  customId: z.string().min(1).max(200).nullable().optional(),
  isMain: bool.optional(),
  isActive: bool.optional(),
  serialNumber: shortText.nullable().optional(),
  batchNumber: shortText.nullable().optional(),
  product: refSchema.nullable().optional(),
  place: refSchema.nullable().optional(),
  gateway: refSchema.nullable().optional(),
  state: jsonObject.nullable().optional(),
  meta: jsonObject.nullable().optional(),
  wifi: wifi.nullable().optional(),
  cellular: cellular.nullable().optional(),
  bluetooth: bluetooth.nullable().optional(),
  lora: lora.nullable().optional(),
  sigfox: sigfox.nullable().optional()
}
export const createDeviceBody = z.object({ name: z.string().min(1).max(200), space: refSchema, ...deviceFields })
export const updateDeviceBody = z.object({
  name: z.string().min(1).max(200).optional(),
  space: refSchema.nullable().optional(),
  ...deviceFields
})

export const deletedSchema = z.object({ id: z.string(), deleted: z.literal(true) }).openapi("Deleted")

// Credentials
export const apiKeySchema = z.object({
  id: z.string(),
  name: z.string(),
  readOnly: z.boolean(),
  hint: z.string().openapi({ description: "the first characters of the secret" }),
  createdAt: epochMs,
  updatedAt: epochMs
}).openapi("ApiKey")
export const createdApiKeySchema = apiKeySchema.extend({ secretKey: z.string() }).openapi("CreatedApiKey")
export const createApiKeyBody = z.object({ name: z.string().min(1).max(200), readOnly: bool.optional() })

export const createOrganisationBody = z.object({
  name: z.string().min(1).max(200),
  owner: z.object({
    emailAddress: z.email({ message: "must be an e-mail address" }),
    fullName: z.string().min(1).max(200),
    password: z.string().min(8, { message: "must be at least 8 characters" }).max(1000)
  })
})
export const createdOrganisationSchema = z.object({
  organisation: z.object({ id: z.string(), name: z.string(), createdAt: epochMs, updatedAt: epochMs }),
  owner: z.object({ id: z.string(), userId: z.string(), emailAddress: z.string(), fullName: z.string(), isAdmin: z.boolean() }),
  apiKey: z.object({ id: z.string(), secretKey: z.string() })
}).openapi("CreatedOrganisation")

export const tokenBody = z.object({
  username: z.string().min(1).max(320).optional(),
  password: z.string().max(1000).optional(),
  scope: z.string().max(200).optional(),
  grantType: z.enum(["password", "refresh_token"]).optional(),
  refreshToken: z.string().optional()
})
export const tokenSchema = z.object({
  accessToken: z.string(),
  token: z.string(),
  refreshToken: z.string(),
  tokenType: z.literal("bearer"),
  expiresIn: z.number().int(),
  scope: z.string()
}).openapi("UserToken")
export const signInBody = z.object({
  emailAddress: z.string().min(1).max(320),
  password: z.string().min(1).max(1000),
  organisationId: z.string().min(1).max(200).optional()
})
export const revokeBody = z.object({ token: z.string().min(1) })

export const whoamiSchema = z.object({
  id: z.string(),
  kind: z.enum(["app", "device", "user", "management"]),
  scope: z.string(),
  organisation: organisationRef,
  device: z.object({ id: z.string() }).optional(),
  user: z.object({ id: z.string(), organisationUserId: z.string(), emailAddress: z.string(), isAdmin: z.boolean() }).optional(),
  apiKey: z.object({ id: z.string(), readOnly: z.boolean() }).optional()
}).openapi("WhoAmI")
