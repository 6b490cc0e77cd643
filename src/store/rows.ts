import type { Row } from "./Sql.ts"

/** Typed readers for driver rows; both drivers return int8 as number and jsonb parsed. */
export const str = (row: Row, column: string): string => String(row[column])
export const optStr = (row: Row, column: string): string | null => {
  const v = row[column]
  return v === null || v === undefined ? null : String(v)
}
export const num = (row: Row, column: string): number => Number(row[column])
export const optNum = (row: Row, column: string): number | null => {
  const v = row[column]
  return v === null || v === undefined ? null : Number(v)
}
export const bool = (row: Row, column: string): boolean => row[column] === true
export const obj = (row: Row, column: string): Record<string, unknown> | null => {
  const v = row[column]
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null
}
export const nested = (row: Row, column: string): Row | null => obj(row, column)
