import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The operator console, built before the browser tests load it (test/support/buildConsole.ts).
    globalSetup: ["test/support/buildConsole.ts"],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // Two cores: files run two at a time; each file has its own store.
    maxWorkers: 2
  }
})
