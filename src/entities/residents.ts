import { Context, Layer } from "effect"

/**
 * The device buckets resident in this process (their entity is active here), for what reaches
 * every hosted device of an organisation: a rules change, announced to every process, is sent
 * only to the buckets each one hosts. A bucket not resident reads the rules when it activates.
 */
export class ResidentBuckets extends Context.Service<ResidentBuckets, {
  readonly add: (bucket: string) => void
  readonly remove: (bucket: string) => void
  readonly list: () => ReadonlyArray<string>
}>()("voltaic/entities/ResidentBuckets") {
  static readonly layer = Layer.sync(ResidentBuckets, () => {
    const buckets = new Set<string>()
    return ResidentBuckets.of({
      add: (bucket) => {
        buckets.add(bucket)
      },
      remove: (bucket) => {
        buckets.delete(bucket)
      },
      list: () => [...buckets]
    })
  })
}
