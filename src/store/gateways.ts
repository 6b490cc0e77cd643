import type { ResourceQuery, Table } from "./crud.ts"
import { bool, num, obj, optNum, optStr, str } from "./rows.ts"
import type { Row } from "./Sql.ts"

export const gatewaysTable: Table = {
  name: "gateways",
  resource: "gateway",
  prefix: "gtw",
  columns: {
    serialNumber: { column: "serial_number" },
    name: { column: "name" },
    isOnline: { column: "is_online" },
    lora: { column: "lora", json: true },
    lastSeenAt: { column: "last_seen_at" }
  },
  references: { product: { column: "product_id", table: "products", resource: "product" } }
}

export interface GatewayJson {
  id: string
  serialNumber: string | null
  name: string
  product: { id: string } | null
  isOnline: boolean
  lora: { gatewayId?: string } | null
  lastSeenAt: number | null
  createdAt: number
  updatedAt: number
}

export const toGateway = (row: Row): GatewayJson => {
  const productId = optStr(row, "product_id")
  return {
    id: str(row, "id"),
    serialNumber: optStr(row, "serial_number"),
    name: str(row, "name"),
    product: productId === null ? null : { id: productId },
    isOnline: bool(row, "is_online"),
    lora: obj(row, "lora"),
    lastSeenAt: optNum(row, "last_seen_at"),
    createdAt: num(row, "created_at"),
    updatedAt: num(row, "updated_at")
  }
}

export const gatewayQuery: ResourceQuery<GatewayJson> = {
  resource: "gateway",
  select: "g.*",
  from: "gateways g",
  base: "gateways g",
  alias: "g",
  map: toGateway,
  order: { createdAt: "g.created_at", updatedAt: "g.updated_at", id: "g.id", name: "g.name", lastSeenAt: "COALESCE(g.last_seen_at, -1)" }
}
