import { Cause, Console, Effect, Logger } from "effect"
import { describe, expect, it } from "vitest"
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
})
