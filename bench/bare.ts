/**
 * The ceiling for `bench/rest.ts`: the same routes on a bare Hono app, no auth, no store,
 * answering fixed items of the shape and size Voltaic sends (devices, events, alerts, spaces). Run as its own
 * process; prints `bare hono listening on <host>:<port>` once ready.
 */
import { serve } from "@hono/node-server"
import { Hono } from "hono"
import type { AddressInfo } from "node:net"

const organisation = { id: "org_01jd0000000000000000000000", name: "Default organisation" }

const device = (id: string) => ({
  id,
  isMain: false,
  isActive: true,
  name: "bench device 0042",
  customId: null,
  serialNumber: null,
  batchNumber: null,
  space: {
    id: "spc_01jd0000000000000000000000",
    clientId: null,
    name: "bench space 3",
    isPublic: false,
    disabled: false,
    avatar: null,
    owner: { organisation },
    timezone: "UTC",
    country: null,
    createdAt: 1_732_240_000_000,
    updatedAt: 1_732_240_000_000
  },
  product: null,
  place: null,
  gateway: null,
  organisation,
  events: [],
  location: null,
  state: null,
  meta: null,
  wifi: null,
  cellular: null,
  bluetooth: null,
  lora: null,
  sigfox: null,
  lastSeenAt: null,
  lastUnprocessedEventTimestamp: null,
  lastProcessedEventTimestamp: null,
  createdAt: 1_732_240_000_000,
  updatedAt: 1_732_240_000_000
})

const space = (i: number) => ({
  ...device("").space,
  id: `spc_01jd${String(i).padStart(22, "0")}`,
  name: `bench space ${i}`,
  live: { devicesOnline: 0, devicesOffline: 0, openAlerts: 6 },
  alertUsers: []
})

const event = (i: number) => ({
  id: `evt_01jd${String(i).padStart(22, "0")}`,
  name: "power",
  data: { watts: 100 + i },
  timestamp: 1_732_240_000_000 + i,
  device: { id: "dev_01jd0000000000000000000000" }
})

const alert = (i: number) => ({
  id: `alt_01jd${String(i).padStart(22, "0")}`,
  state: "unresolved",
  note: "power out of range",
  event: { id: `evt_01jd${String(i).padStart(22, "0")}`, name: "power", data: { watts: 500 }, timestamp: 1_732_240_000_000 + i },
  device: { id: `dev_01jd${String(i).padStart(22, "0")}`, name: `bench alerting ${i}`, customId: null, space: { id: "spc_01jd0000000000000000000000" }, product: null },
  gateway: null,
  alertRule: { id: "rul_01jd0000000000000000000000", name: "bench hot", type: "threshold", severity: "high", autoResolve: false },
  firstSeenAt: 1_732_240_000_000 + i,
  lastSeenAt: 1_732_240_000_000 + i,
  acknowledgedAt: null,
  resolvedAt: null,
  notifications: [],
  createdAt: 1_732_240_000_000 + i,
  updatedAt: 1_732_240_000_000 + i
})

/** `limit` as the API reads it (1–200, default 20). */
const limitOf = (value: string | undefined) => Math.min(Math.max(Number(value ?? 20) || 20, 1), 200)

const app = new Hono()
app.get("/v1/devices/:id", (c) => c.json(device(c.req.param("id"))))
app.get("/v1/events", (c) => {
  const items = Array.from({ length: limitOf(c.req.query("limit")) }, (_, i) => event(i))
  return c.json({ events: items, count: items.length })
})
app.get("/v1/alerts", (c) => c.json(Array.from({ length: limitOf(c.req.query("limit")) }, (_, i) => alert(i))))
app.get("/v1/spaces", (c) => {
  const items = Array.from({ length: Math.min(limitOf(c.req.query("limit")), 10) }, (_, i) => space(i))
  return c.json({ spaces: items, count: items.length })
})
app.get("/v1/devices", (c) => {
  const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 20) || 20, 1), 100)
  return c.json(Array.from({ length: limit }, (_, i) => device(`dev_01jd${String(i).padStart(22, "0")}`)))
})

const host = process.env.HOST ?? "127.0.0.1"
const server = serve({ fetch: app.fetch, port: 0, hostname: host }, (info: AddressInfo) => {
  console.log(`bare hono listening on ${host}:${info.port}`)
})

const stop = () => server.close(() => process.exit(0))
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
