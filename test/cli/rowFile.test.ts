import { mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { InvalidInput } from "../../src/domain/errors.ts"
import { parseImportBody, parseImportText } from "../../src/energy/import.ts"
import { rowBatches, RowFileError, type RowText } from "../../src/cli/rowFile.ts"

let dir: string
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "voltaic-rowfile-"))
})
afterAll(() => rm(dir, { recursive: true, force: true }))

let files = 0
const rowsOf = async (content: string, batchSize = 1000, chunkBytes?: number): Promise<Array<RowText>> => {
  const path = join(dir, `f${files++}`)
  await writeFile(path, content)
  const rows: Array<RowText> = []
  for await (const batch of rowBatches(path, batchSize, undefined, chunkBytes)) {
    expect(batch.length).toBeLessThanOrEqual(batchSize)
    rows.push(...batch)
  }
  return rows
}

const refusal = (content: string) => rowsOf(content).then(() => undefined, (error: unknown) => error)

describe("the rows of an import file", () => {
  it("are NDJSON lines, blank ones skipped, each with its line number, in batches", async () => {
    const rows = await rowsOf('\n{"a":1}\r\n\n  {"a":2}\n{"a":3}', 2)
    expect(rows).toEqual([{ line: 2, text: '{"a":1}\r' }, { line: 4, text: '  {"a":2}' }, { line: 5, text: '{"a":3}' }])
  })

  it("are a JSON array's elements, each with the line it starts on, whatever the chunks cut", async () => {
    const content = '\uFEFF [\n {"a":"x,]}{\\"y"},\n {"b":[1,{"c":2}]}\n,\n"s"\n]\n'
    for (const chunk of [1, 2, 3, 7, 1 << 20]) {
      const rows = await rowsOf(content, 1000, chunk)
      expect(rows.map((r) => [r.line, JSON.parse(r.text)])).toEqual([[2, { a: 'x,]}{"y' }], [3, { b: [1, { c: 2 }] }], [5, "s"]])
    }
    expect(await rowsOf("[ ]")).toEqual([])
    expect(await rowsOf("  \n")).toEqual([])
  })

  it("refuse a broken array with the line that breaks it", async () => {
    const cases: Array<[string, number, RegExp]> = [
      ['[{"a":1},\n]', 2, /missing between the last , and the \]/],
      ['[\n,{"a":1}]', 2, /missing before this ,/],
      ['[{"a":1}]\n\n{"b":2}', 3, /after the array's closing \]/],
      ['[{"a":1},\n{"a":2}', 2, /ends before the array's closing \]/],
      ['[{"a":1}}]', 1, /a \} closes nothing/]
    ]
    for (const [content, line, message] of cases) {
      const error = await refusal(content)
      expect(error).toBeInstanceOf(RowFileError)
      expect((error as RowFileError).line).toBe(line)
      expect((error as RowFileError).message).toMatch(message)
    }
  })
})

describe("parseImportText: one row by the HTTP import's rules", () => {
  const device = "dev_0123456789"
  const rows = [
    { device, timestamp: "2025-01-01T00:00:00Z", value: 1.5 },
    { device: { id: device }, timestamp: 1735689600000, meter: "12.5", source: "solar", flow: "production" },
    { device, timestamp: "soon", value: 1 },
    { device, timestamp: 1, value: -1 },
    { device, timestamp: 1, value: 1, meter: 2 },
    { device, timestamp: 1, value: 1, note: "nul\u0000" },
    { device, timestamp: 1, value: 1, deep: JSON.parse("[".repeat(62) + "]".repeat(62)) },
    { device, timestamp: 1, value: 1, deep: JSON.parse("[".repeat(63) + "]".repeat(63)) },
    [1]
  ]
  it("answers as parseImportBody does for that row, the row named by its index", () => {
    rows.forEach((row, index) => {
      const text = JSON.stringify(row)
      // The same row at the same index of a body: the body's first bad row is this one.
      const body = parseImportBody("electricity", JSON.stringify([...rows.slice(0, index).map(() => rows[0]), row]))
      const one = parseImportText("electricity", text, index)
      if (body instanceof InvalidInput) {
        expect(one).toBeInstanceOf(InvalidInput)
        const refused = one as InvalidInput
        expect(refused.field).toMatch(new RegExp(`^rows\\[${index}\\]`))
        // The body's depth is checked on its whole text (field "rows"); the row's names the row.
        if (body.field === "rows") expect(refused.message.slice(refused.field.length)).toBe(body.message.slice(body.field.length))
        else expect(refused).toEqual(body)
      } else {
        expect(one).toEqual(body[index])
      }
    })
    expect(parseImportText("electricity", JSON.stringify(rows[2]), 2)).toBeInstanceOf(InvalidInput)
  })

  it("refuses a row nested a million levels deep, as an array body, NDJSON and one row, naming the row", () => {
    const ok = JSON.stringify({ device, timestamp: 1, value: 1 })
    const deep = `{"device":"${device}","timestamp":1,"value":1,"deep":${"[".repeat(1_000_000)}${"]".repeat(1_000_000)}}`
    const levels = (field: string) => field.split("[0]").length - 1
    for (const body of [`[${ok},${deep}]`, `${ok}\n\n${deep}\n`]) {
      const refused = parseImportBody("electricity", body)
      expect(refused).toBeInstanceOf(InvalidInput)
      const { field, message } = refused as InvalidInput
      expect(field.startsWith("rows[1].deep[0]")).toBe(true)
      // The row is level 1, its "deep" level 2: the first level past 64 is refused.
      expect(levels(field)).toBe(62)
      expect(message).toBe(`${field}: must be at most 64 levels deep`)
    }
    const one = parseImportText("electricity", deep, 1)
    expect(one).toEqual(parseImportBody("electricity", `[${ok},${deep}]`))
    expect(parseImportText("electricity", "{oops", 7)).toMatchObject({ field: "rows[7]" })
  })
})
