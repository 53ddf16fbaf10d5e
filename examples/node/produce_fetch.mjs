// Brook from Node.js through its gRPC contract alone: @grpc/grpc-js with @grpc/proto-loader
// loading proto/brook/v1/*.proto at run time (no generated code).
//
//   node examples/node/produce_fetch.mjs STORAGE_NODE_ADDRESS TOPIC COUNT
//
// Asks the storage node at STORAGE_NODE_ADDRESS (host:port of its GRPC listener) which node
// leads partition 0 of TOPIC (StorageService.GetMetadata; the topic must exist), produces
// COUNT records to it with StorageService.ProduceRecords (plain protobuf records, acks=all, in
// requests of BATCH records), then reads them back from offset 0 with StorageService.Fetch
// (decode_records: the server decodes its RecordBatches into the same Record messages).
//
// Record i has key "key-i" (none for every fourth record), value "value i ü" and the headers
// index=i, trace=a, trace=b (a repeated name) and absent (a null value). Prints one JSON
// object: {leader, base_offsets, records: [{offset, key, value, headers: [[name, value]]}]}
// with keys, values and header values as UTF-8 strings (null when absent). Exits 1 with the
// reason on stderr if anything fails or takes longer than DEADLINE_MS.

import path from "node:path";
import { fileURLToPath } from "node:url";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const PROTO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../proto");
const BATCH = 4;
const DEADLINE_MS = 30_000;
const RPC_TIMEOUT_MS = 10_000;

const [address, topic, countText] = process.argv.slice(2);
const count = Number(countText);
if (!address || !topic || !Number.isInteger(count) || count < 1) {
  console.error("usage: produce_fetch.mjs STORAGE_NODE_ADDRESS TOPIC COUNT (COUNT >= 1)");
  process.exit(2);
}

const definition = protoLoader.loadSync("brook/v1/storage.proto", {
  includeDirs: [PROTO_ROOT],
  keepCase: true, // the .proto's snake_case field names
  longs: String, // int64 offsets as decimal strings: exact in JSON
  enums: String,
  defaults: true, // plain fields at their zero value; proto3 `optional` ones stay absent
  oneofs: true,
});
const { StorageService } = grpc.loadPackageDefinition(definition).brook.v1;
const deadline = Date.now() + DEADLINE_MS;

function storage(target) {
  return new StorageService(target, grpc.credentials.createInsecure());
}

function call(client, method, request) {
  return new Promise((resolve, reject) => {
    const options = { deadline: new Date(Math.min(deadline, Date.now() + RPC_TIMEOUT_MS)) };
    client[method](request, options, (error, response) => {
      if (error) reject(new Error(`${method}: ${error.message}`));
      else resolve(response);
    });
  });
}

function checkNoError(method, result) {
  if (result.error_code !== "ERROR_CODE_NONE") {
    throw new Error(`${method} ${result.topic}-${result.partition}: ${result.error_code} ${result.error_message}`);
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function record(i) {
  const headers = [
    { key: "index", value: Buffer.from(String(i)) },
    { key: "trace", value: Buffer.from("a") },
    { key: "trace", value: Buffer.from("b") },
    { key: "absent" }, // no value: a null header value
  ];
  const value = Buffer.from(`value ${i} ü`);
  return i % 4 === 3 ? { value, headers } : { key: Buffer.from(`key-${i}`), value, headers };
}

const text = (bytes) => (bytes == null ? null : Buffer.from(bytes).toString("utf8"));

// The leader of partition 0 and its GRPC address, waiting (bounded) for one to be elected.
async function findLeader(bootstrap) {
  for (;;) {
    const metadata = await call(bootstrap, "GetMetadata", { topics: [topic] });
    const described = metadata.topics.find((t) => t.name === topic);
    const partition = described?.partitions.find((p) => p.partition === 0);
    const broker = metadata.brokers.find((b) => b.node_id === partition?.leader_id);
    const endpoint = broker?.endpoints.find((e) => e.listener === "GRPC");
    if (endpoint) return { id: broker.node_id, address: `${endpoint.host}:${endpoint.port}` };
    if (Date.now() > deadline) throw new Error(`no leader for ${topic}-0: ${JSON.stringify(metadata)}`);
    await sleep(100);
  }
}

async function produce(leader) {
  const baseOffsets = [];
  for (let first = 0; first < count; first += BATCH) {
    const records = [];
    for (let i = first; i < Math.min(count, first + BATCH); i++) records.push(record(i));
    const response = await call(leader, "ProduceRecords", {
      acks: "ACKS_ALL",
      timeout_ms: RPC_TIMEOUT_MS,
      partitions: [{ topic, partition: 0, records }],
    });
    const [result] = response.partitions;
    checkNoError("ProduceRecords", result);
    baseOffsets.push(result.base_offset);
  }
  return baseOffsets;
}

async function fetchAll(leader) {
  const fetched = [];
  let offset = 0n;
  while (fetched.length < count) {
    if (Date.now() > deadline) throw new Error(`fetched ${fetched.length} of ${count} records`);
    const response = await call(leader, "Fetch", {
      max_wait_ms: 500,
      min_bytes: 1,
      max_bytes: 1 << 20,
      isolation_level: "ISOLATION_LEVEL_READ_UNCOMMITTED",
      decode_records: true,
      partitions: [{ topic, partition: 0, fetch_offset: String(offset), partition_max_bytes: 1 << 20 }],
    });
    const [result] = response.partitions;
    checkNoError("Fetch", result);
    for (const r of result.decoded_records) {
      fetched.push({
        offset: r.offset,
        key: text(r.key),
        value: text(r.value),
        headers: r.headers.map((h) => [h.key, text(h.value)]),
      });
      offset = BigInt(r.offset) + 1n;
    }
  }
  return fetched;
}

const bootstrap = storage(address);
try {
  const leader = await findLeader(bootstrap);
  const client = leader.address === address ? bootstrap : storage(leader.address);
  try {
    const baseOffsets = await produce(client);
    const records = await fetchAll(client);
    console.log(JSON.stringify({ leader: leader.id, base_offsets: baseOffsets, records }));
  } finally {
    client.close();
  }
} catch (error) {
  console.error(`produce_fetch: ${error.message}`);
  process.exitCode = 1;
} finally {
  bootstrap.close();
}
