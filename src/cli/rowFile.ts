import { createReadStream } from "node:fs"
import { StringDecoder } from "node:string_decoder"

/**
 * The rows of an import file, read as a stream so a file of any size takes memory for one
 * batch: NDJSON (one JSON value per line, blank lines skipped) or one JSON array, told apart
 * by the first character that is not white space, as the HTTP import does. Each row is
 * handed over as its JSON text with the line it starts on; parsing and checking it is the
 * caller's (`parseImportText`).
 */

/** One row's JSON text and the (1-based) line of the file it starts on. */
export interface RowText {
  readonly line: number
  readonly text: string
}

/** The file is not NDJSON or a JSON array at `line`. */
export class RowFileError extends Error {
  constructor(readonly line: number, message: string) {
    super(message)
  }
}

interface Splitter {
  push(text: string, emit: (row: RowText) => void): void
  end(emit: (row: RowText) => void): void
}

const NEWLINE = 0x0a
const CARRIAGE_RETURN = 0x0d
const SPACE = 0x20
const TAB = 0x09
const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c
const OPEN_BRACKET = 0x5b
const CLOSE_BRACKET = 0x5d
const OPEN_BRACE = 0x7b
const CLOSE_BRACE = 0x7d

const isSpace = (c: number) => c === SPACE || c === NEWLINE || c === CARRIAGE_RETURN || c === TAB

/** NDJSON: every non-blank line is a row. */
const lines = (): Splitter => {
  let rest = ""
  let line = 0
  return {
    push(text, emit) {
      const parts = (rest + text).split("\n")
      rest = parts.pop()!
      for (const part of parts) {
        line++
        if (part.trim() !== "") emit({ line, text: part })
      }
    },
    end(emit) {
      line++
      if (rest.trim() !== "") emit({ line, text: rest })
    }
  }
}

/**
 * A JSON array: each element's text, cut at the commas and the closing bracket outside any
 * string or nested value. Malformed elements are left for `JSON.parse` to name; only what
 * breaks the array itself is refused here.
 */
const arrayElements = (): Splitter => {
  let state: "open" | "first" | "next" | "value" | "closed" = "open"
  let line = 1
  let start = 0
  let depth = 0
  let inString = false
  let escaped = false
  let pieces: Array<string> = []
  return {
    push(text, emit) {
      let from = state === "value" ? 0 : -1
      for (let i = 0; i < text.length; i++) {
        const c = text.charCodeAt(i)
        if (c === NEWLINE) line++
        if (state === "value") {
          if (inString) {
            if (escaped) escaped = false
            else if (c === BACKSLASH) escaped = true
            else if (c === QUOTE) inString = false
          } else if (c === QUOTE) inString = true
          else if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++
          else if ((c === COMMA && depth === 0) || ((c === CLOSE_BRACE || c === CLOSE_BRACKET) && depth === 0)) {
            if (c === CLOSE_BRACE) throw new RowFileError(line, "a } closes nothing")
            pieces.push(text.slice(from, i))
            emit({ line: start, text: pieces.join("") })
            pieces = []
            state = c === COMMA ? "next" : "closed"
          } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--
          continue
        }
        if (isSpace(c)) continue
        if (state === "open") {
          if (c !== OPEN_BRACKET) throw new RowFileError(line, "must be a JSON array or NDJSON of readings")
          state = "first"
        } else if (state === "closed") {
          throw new RowFileError(line, "text after the array's closing ]")
        } else if (c === CLOSE_BRACKET) {
          if (state === "next") throw new RowFileError(line, "a row is missing between the last , and the ]")
          state = "closed"
        } else if (c === COMMA) {
          throw new RowFileError(line, "a row is missing before this ,")
        } else {
          state = "value"
          start = line
          depth = 0
          from = i
          i-- // read this character again as the row's first
        }
      }
      if (state === "value") pieces.push(text.slice(from))
    },
    end() {
      if (state !== "closed") throw new RowFileError(line, "the file ends before the array's closing ]")
    }
  }
}

/** Bytes read per chunk. */
const CHUNK_BYTES = 1 << 20

/**
 * The file's rows in batches of at most `batchSize`, in file order. `onBytes` is told the
 * size of each chunk read (progress before the rows are counted). Throws `RowFileError` where
 * the file breaks the format, and the file system's error when it cannot be read. `chunkBytes`
 * is for tests of rows cut across chunks.
 */
export async function* rowBatches(
  path: string,
  batchSize: number,
  onBytes: (bytes: number) => void = () => {},
  chunkBytes = CHUNK_BYTES
): AsyncGenerator<Array<RowText>> {
  const decoder = new StringDecoder("utf8")
  let splitter: Splitter | undefined
  let leading = ""
  let batch: Array<RowText> = []
  const emit = (row: RowText) => void batch.push(row)
  const feed = (text: string) => {
    if (splitter === undefined) {
      // Held until the first character that is not white space (or a byte-order mark) tells the format.
      leading += text
      const body = leading.replace(/^\uFEFF/, "")
      const first = body.search(/\S/)
      if (first === -1) return
      splitter = body[first] === "[" ? arrayElements() : lines()
      text = body
    }
    splitter.push(text, emit)
  }
  for await (const chunk of createReadStream(path, { highWaterMark: chunkBytes })) {
    const bytes = chunk as Buffer
    onBytes(bytes.length)
    feed(decoder.write(bytes))
    while (batch.length >= batchSize) yield batch.splice(0, batchSize)
  }
  feed(decoder.end())
  splitter?.end(emit)
  while (batch.length > 0) yield batch.splice(0, batchSize)
}
