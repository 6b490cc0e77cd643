import { Cause, Console, Effect, Logger } from "effect"
import { describe, expect, it } from "vitest"
import { printable } from "../../src/adapters/logLine.ts"
import { jsonLogger, textLogger } from "../../src/logFormat.ts"

/** Logs `effect` through `logger`, answering the lines written to the console (stdout and stderr alike). */
const linesOf = (logger: Logger.Logger<unknown, unknown>, effect: Effect.Effect<void>) => {
  const lines: Array<string> = []
  const write = (...args: ReadonlyArray<unknown>) => void lines.push(args.map(String).join(" "))
  const console = { ...globalThis.console, log: write, error: write, info: write, warn: write, debug: write }
  Effect.runSync(effect.pipe(
    Effect.provideService(Logger.CurrentLoggers, new Set([logger])),
    Effect.provideService(Console.Console, console)
  ))
  return lines
}

/** How Node's `readline` splits lines (and JavaScript source): what a log reader takes as line ends. */
const LINE_ENDS = /\r?\n|\r|\u2028|\u2029/
/** Characters no log line may hold raw: C0 and C1 controls, the line and paragraph separators. */
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/

/** A client id a peer chose: a terminal's clear-screen, a line separator forging a line, a C1 control. */
const EVIL = "evil\u001b[2J\u2028[12:00:00.000] ERROR (#1): forged\u0085\u009b31m"

const refusal = Effect.logInfo("http GET /v1/devices refused 401 unauthorized: not authenticated").pipe(
  Effect.annotateLogs({ requestId: "abc-1", route: "/v1/devices", principal: "app:key_1" })
)

describe("LOG_FORMAT", () => {
  it("text: one line per log, its annotations and fields as key=value after the message", () => {
    const lines = linesOf(textLogger, Effect.andThen(refusal, Effect.logWarning("e-mail not sent", { alert: "alt_1", error: "550 no such user" })))
    expect(lines).toHaveLength(2)
    expect(lines[0]).toMatch(
      /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(#\d+\): http GET \/v1\/devices refused 401 unauthorized: not authenticated requestId=abc-1 route=\/v1\/devices principal=app:key_1$/
    )
    expect(lines[1]).toMatch(/WARN \(#\d+\): e-mail not sent alert=alt_1 error="550 no such user"$/)
  })

  it("json: one object per line with time, level, message, the annotations and a failure's cause", () => {
    const [line, failed] = linesOf(
      jsonLogger.pipe(Logger.withConsoleLog),
      Effect.andThen(refusal, Effect.logError("http GET /v1/x failed", Cause.die(new Error("boom"))))
    )
    expect(JSON.parse(line)).toEqual({
      time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      level: "info",
      message: "http GET /v1/devices refused 401 unauthorized: not authenticated",
      requestId: "abc-1",
      route: "/v1/devices",
      principal: "app:key_1"
    })
    const fault = JSON.parse(failed)
    expect(fault).toMatchObject({ level: "error", message: "http GET /v1/x failed" })
    expect(fault.cause).toContain("Error: boom")
  })

  it("text: what a peer chose stays on the line and cannot drive the terminal", () => {
    const [line] = linesOf(
      textLogger,
      Effect.logInfo(printable(`mqtt publish on devices/a\u2029b from client ${EVIL} refused`), { key: "k\u2028v", plain: "word" }).pipe(
        Effect.annotateLogs({ clientId: EVIL })
      )
    )
    expect(line.split(LINE_ENDS)).toHaveLength(1)
    expect(line).not.toMatch(CONTROLS)
    expect(line).toContain("on devices/a\\u2029b from client evil\\u001b[2J\\u2028[12:00:00.000] ERROR (#1): forged\\u0085\\u009b31m refused")
    // A field holding a control is quoted, and reads back as the value it was.
    const clientId = /clientId=("(?:[^"\\]|\\.)*")/.exec(line)
    expect(clientId).not.toBeNull()
    expect(JSON.parse(clientId![1])).toBe(EVIL)
    expect(line).toMatch(/ key="k\\u2028v" plain=word$/)
  })

  it("text: a failure's stack keeps its lines, indented; a peer's line ends and controls in it are escaped", () => {
    const forged = `boom\r\u2028ERROR forged ${EVIL}\n[12:00:00.000] ERROR (#1): forged too`
    const lines = linesOf(textLogger, Effect.logError("http POST /v1/x failed", Cause.die(new Error(forged))))
    expect(lines).toHaveLength(1)
    const [first, ...stack] = lines[0].split("\n")
    expect(first).toMatch(/^\[[\d:.]+\] ERROR \(#\d+\): http POST \/v1\/x failed$/)
    expect(stack.length).toBeGreaterThan(2)
    expect(stack[0]).toContain("Error: boom\\u000d\\u2028ERROR forged evil\\u001b[2J")
    expect(stack[1]).toBe("  [12:00:00.000] ERROR (#1): forged too")
    // Every line after the entry's first is indented: none passes for an entry of its own.
    for (const l of stack) {
      expect(l).toMatch(/^\s/)
      expect(l).not.toMatch(/[\r\u2028\u2029\u001b\u0085\u009b]/)
    }
  })

  it("json: what a peer chose stays on the line, and parses back to what it was", () => {
    const [line] = linesOf(
      jsonLogger.pipe(Logger.withConsoleLog),
      Effect.logInfo(`refused ${EVIL}`, { key: "k\u2028v" }).pipe(Effect.annotateLogs({ clientId: EVIL }))
    )
    expect(line.split(LINE_ENDS)).toHaveLength(1)
    expect(line).not.toMatch(CONTROLS)
    expect(JSON.parse(line)).toMatchObject({ message: `refused ${EVIL}`, clientId: EVIL, key: "k\u2028v" })
  })

  it("printable escapes the line separators and controls, and bounds the line", () => {
    expect(printable("a\u2028b\u2029c\u0085d\ne\u001bf")).toBe("a\\u2028b\\u2029c\\u0085d\\u000ae\\u001bf")
    expect(printable("é ✓ 𝄞 plain")).toBe("é ✓ 𝄞 plain")
    expect(printable("x".repeat(3_000))).toBe(`${"x".repeat(2_000)}…`)
  })
})
