import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Cause, Console, Effect } from "effect"
import { CliError, Command } from "effect/cli"
import { describeStartupFailure } from "../app.ts"
import { RecoveryRefused } from "../store/recovery.ts"
import { adminCommand, keysCommand } from "./recovery.ts"

/** `npm run voltaic -- <command>`: the operator's tool, on the server's database and settings. */
const voltaic = Command.make("voltaic").pipe(
  Command.withDescription("Voltaic's command-line tool; it reads the server's settings (DATABASE_URL, DATA_DIR)"),
  Command.withSubcommands([adminCommand, keysCommand])
)

/** One line, as a failed start prints it; the CLI library has already shown its own usage errors. */
const report = (cause: Cause.Cause<unknown>) => {
  const failure = cause.reasons.find(Cause.isFailReason)?.error
  if (CliError.isCliError(failure) || Cause.hasInterruptsOnly(cause)) return Effect.void
  return Console.error(`voltaic: ${failure instanceof RecoveryRefused ? failure.message : describeStartupFailure(cause)}`)
}

Command.run(voltaic, { version: process.env.npm_package_version ?? "0.1.0" }).pipe(
  Effect.tapCause(report),
  Effect.provide(NodeServices.layer),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
