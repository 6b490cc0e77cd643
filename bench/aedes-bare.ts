/**
 * A ceiling for `bench/ingest.ts`: a bare aedes broker with its defaults (in-memory
 * persistence), no authentication and no storage, on node:net. Run as its own process;
 * prints `bare aedes listening on <host>:<port>` once ready.
 */
import { Aedes } from "aedes"
import { type AddressInfo, createServer } from "node:net"

const host = process.env.HOST ?? "127.0.0.1"
const broker = await Aedes.createBroker()
// Without a listener the EventEmitter would throw; closed connections are expected here.
broker.on("clientError", () => {})
broker.on("connectionError", () => {})
const server = createServer((socket) => broker.handle(socket))
server.listen(0, host, () => {
  const { port } = server.address() as AddressInfo
  console.log(`bare aedes listening on ${host}:${port}`)
})

const stop = () => {
  server.close()
  broker.close(() => process.exit(0))
  setTimeout(() => process.exit(0), 2_000).unref()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
