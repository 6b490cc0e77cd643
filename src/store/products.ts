import type { ResourceQuery, Table } from "./crud.ts"
import { num, obj, optStr, str } from "./rows.ts"
import type { Row } from "./Sql.ts"

export const productsTable: Table = {
  name: "products",
  resource: "product",
  prefix: "prd",
  columns: {
    name: { column: "name" },
    description: { column: "description" },
    manufacturer: { column: "manufacturer" },
    model: { column: "model" },
    category: { column: "category" },
    image: { column: "image" },
    colour: { column: "colour" },
    state: { column: "state", json: true }
  },
  references: {}
}

export interface ProductJson {
  id: string
  name: string
  description: string | null
  manufacturer: string | null
  model: string | null
  category: string | null
  image: string | null
  colour: string | null
  state: Record<string, unknown> | null
  createdAt: number
  updatedAt: number
}

export const toProduct = (row: Row): ProductJson => ({
  id: str(row, "id"),
  name: str(row, "name"),
  description: optStr(row, "description"),
  manufacturer: optStr(row, "manufacturer"),
  model: optStr(row, "model"),
  category: optStr(row, "category"),
  image: optStr(row, "image"),
  colour: optStr(row, "colour"),
  state: obj(row, "state"),
  createdAt: num(row, "created_at"),
  updatedAt: num(row, "updated_at")
})

export const productQuery: ResourceQuery<ProductJson> = {
  resource: "product",
  select: "p.*",
  from: "products p",
  base: "products p",
  alias: "p",
  map: toProduct,
  order: { createdAt: "p.created_at", updatedAt: "p.updated_at", id: "p.id", name: "p.name" }
}
