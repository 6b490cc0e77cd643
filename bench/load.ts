/**
 * The load generator of `bench/rest.ts`, in its own process so it does not share an
 * event loop with the server under test. Reads a `LoadSpec` as JSON on stdin, runs a
 * warm-up and then the measured autocannon run; writes `MEASURING` on a line of stdout as
 * the measured run starts and one `LoadResult` as JSON on the last line.
 */
import autocannon from "autocannon"
import { text } from "node:stream/consumers"
import { type LoadResult, type LoadSpec, MEASURING } from "./protocol.ts"

const run = (spec: LoadSpec, durationSeconds: number) => {
  let next = 0
  return autocannon({
    url: spec.url,
    connections: spec.connections,
    duration: durationSeconds,
    headers: { ...spec.headers },
    requests: [{
      method: "GET",
      setupRequest: (request) => {
        const path = spec.paths[next]
        next = (next + 1) % spec.paths.length
        return { ...request, path }
      }
    }]
  })
}

const main = async () => {
  const spec = JSON.parse(await text(process.stdin)) as LoadSpec
  if (spec.paths.length === 0) throw new Error("load: no paths to request")
  if (spec.warmupSeconds > 0) await run(spec, spec.warmupSeconds)
  process.stdout.write(`${MEASURING}\n`)
  const cpuBefore = process.cpuUsage()
  const result = await run(spec, spec.durationSeconds)
  const cpu = process.cpuUsage(cpuBefore)
  const completed = result["2xx"] + result.non2xx
  const out: LoadResult = {
    requestsPerSecond: result.requests.average,
    requests: result.requests.total,
    latencyMs: {
      p50: result.latency.p50,
      p90: result.latency.p90,
      p99: result.latency.p99,
      max: result.latency.max,
      mean: result.latency.mean
    },
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    bytesPerResponse: completed > 0 ? result.throughput.total / completed : 0,
    durationSeconds: result.duration,
    loadCpuShare: (cpu.user + cpu.system) / 1e6 / result.duration
  }
  process.stdout.write(`${JSON.stringify(out)}\n`)
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error)
    process.exit(1)
  }
)
