#!/usr/bin/env node
import "../quietDebug.ts"
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Cause, Effect } from "effect"
import { CliError, Command } from "effect/cli"
import { describeStartupFailure } from "../startupFailure.ts"
import { run } from "../launch.ts"
import { nodeHooks } from "../nodeProcess.ts"
import { RecoveryRefused } from "../store/recovery.ts"
import { doctorCommand, ProblemsFound } from "./doctor.ts"
import { importCommand, ImportRefused } from "./importEnergy.ts"
import { adminCommand, keysCommand } from "./recovery.ts"
import { migrateCommand, startCommand } from "./server.ts"

/** `voltaic <command>` (the package's bin; `npm run voltaic -- <command>` from the sources): the operator's tool. */
const voltaic = Command.make("voltaic").pipe(
  Command.withDescription("Voltaic's command-line tool; it reads the server's settings (DATABASE_URL, DATA_DIR, …)"),
  Command.withSubcommands([startCommand, migrateCommand, adminCommand, keysCommand, importCommand, doctorCommand])
)

/** One line, as a failed start prints it; none where the CLI library showed its own usage error. */
const describeFailure = (cause: Cause.Cause<unknown>): string | undefined => {
  const failure = cause.reasons.find(Cause.isFailReason)?.error
  if (CliError.isCliError(failure)) return undefined
  return failure instanceof RecoveryRefused || failure instanceof ImportRefused || failure instanceof ProblemsFound
    ? failure.message
    : describeStartupFailure(cause)
}

run(
  Command.run(voltaic, { version: process.env.npm_package_version ?? "0.1.0" }).pipe(Effect.provide(NodeServices.layer)),
  nodeHooks,
  describeFailure
)
