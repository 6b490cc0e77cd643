// aedes-persistence ships its in-memory store's types under `types/`, not beside the module.
declare module "aedes-persistence/asyncPersistence.js" {
  import MemoryPersistence from "aedes-persistence/types/asyncPersistence"
  export default MemoryPersistence
}
