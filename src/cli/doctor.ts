import { Cause, Console, Effect, Result, Schema } from "effect"
import { Command } from "effect/cli"
import { describeStartupFailure } from "../startupFailure.ts"
import { AppConfig } from "../config.ts"
import { checkDatabase, checkNats, checkPorts, checkTls, type Verdict } from "./checks.ts"

/** `voltaic doctor` found problems; each was printed on its own line. */
export class ProblemsFound extends Schema.TaggedError<ProblemsFound>()("ProblemsFound", {
  message: Schema.String
}) {}

const MARKS: Record<Verdict["status"], string> = { ok: "✓", warn: "!", fail: "✗" }

const line = (verdict: Verdict) => `${MARKS[verdict.status]} ${verdict.subject}: ${verdict.detail}`

/**
 * `voltaic doctor`: what a start needs, checked without starting: the settings, each port,
 * the database and its migrations, NATS, the TLS certificate. One line per check, as it
 * completes; exit 1 when any failed (warnings do not fail it).
 */
export const doctorCommand = Command.make("doctor", {}, () =>
  Effect.gen(function*() {
    const config = yield* Effect.result(AppConfig)
    if (Result.isFailure(config)) {
      yield* Console.log(line({ status: "fail", subject: "configuration", detail: describeStartupFailure(Cause.fail(config.failure)).replace(/^invalid configuration: /, "") }))
      yield* Console.log("  (the other checks need the configuration)")
      return yield* new ProblemsFound({ message: "the configuration does not parse" })
    }
    const settings = config.success
    yield* Console.log(line({ status: "ok", subject: "configuration", detail: "every setting parses" }))
    const verdicts: Array<Verdict> = []
    const report = (found: ReadonlyArray<Verdict>) => {
      verdicts.push(...found)
      return Effect.forEach(found, (v) => Console.log(line(v)), { discard: true })
    }
    yield* report(yield* checkPorts(settings))
    yield* report([yield* checkDatabase(settings)])
    yield* report(yield* checkNats(settings))
    yield* report(yield* checkTls(settings, Date.now()))
    const failed = verdicts.filter((v) => v.status === "fail").length
    if (failed > 0) return yield* new ProblemsFound({ message: `${failed} check${failed === 1 ? "" : "s"} failed (✗ above)` })
  })).pipe(Command.withDescription("Check the settings, ports, database, NATS and TLS certificate a start needs, and name what is wrong"))
