import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // dist/ (server, command-line tool, operator console) built when its sources changed, before
    // the tests that spawn or load it (test/support/buildDist.ts).
    globalSetup: ["test/support/buildDist.ts"],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // Two cores: files run two at a time; each file has its own store.
    maxWorkers: 2,
    // Files share their worker's modules: each file's apps start and stop in its own hooks, and no
    // test changes a module (no vi.mock). Importing Effect and the sources per file took 120-150 s
    // of a full run, and each file's first PGlite compiled its wasm again (641 s against 714 s).
    isolate: false
  }
})
