#!/usr/bin/env node
// The npm registry reachable here serves only the linux-x64 build of some platform packages
// (@deno/darwin-arm64 & co. answer 404), so `npm install` leaves them out of
// package-lock.json and `npm ci` then refuses the lock as out of sync. This adds the missing
// optional platform entries, marked with their os/cpu so npm skips them on this platform.
// Idempotent; .ci/run calls it before `npm ci`.
import { readFileSync, writeFileSync } from "node:fs"

const path = new URL("../package-lock.json", import.meta.url)
const lock = JSON.parse(readFileSync(path, "utf8"))
const packages = lock.packages
let added = 0
for (const [key, entry] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const target = `node_modules/${name}`
    if (packages[target] !== undefined || packages[`${key}/${target}`] !== undefined) continue
    const match = /[-/](darwin|linux|win32|freebsd|android)-(x64|arm64|ia32|arm)(?:-(glibc|musl))?$/.exec(name)
    if (match === null) continue
    packages[target] = {
      version,
      cpu: [match[2]],
      ...(entry.dev ? { dev: true } : {}),
      license: entry.license ?? "MIT",
      optional: true,
      os: [match[1]]
    }
    added++
  }
}
if (added > 0) {
  const [root, ...rest] = Object.entries(packages)
  lock.packages = Object.fromEntries([root, ...rest.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))])
  writeFileSync(path, JSON.stringify(lock, null, 2) + "\n")
}
console.log(`fix-lock: ${added} optional platform entr${added === 1 ? "y" : "ies"} added`)
