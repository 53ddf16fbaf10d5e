// kafkajs (npm, 2.2.4) against the Brook gateway, driven by tests/compat/test_kafkajs.py.
//
//   node kafkajs_client.mjs produce BOOTSTRAP TOPIC          (BOOTSTRAP: host:port,host:port)
//     creates TOPIC (2 partitions) with the admin client, reads its metadata back, and sends
//     RECORDS records per partition with keys and headers in three sends: acks=-1, acks=1,
//     and acks=-1 with gzip.
//   node kafkajs_client.mjs consume BOOTSTRAP TOPIC GROUP COUNT
//     reads COUNT records from the beginning as a member of GROUP (consumer.run, eachMessage),
//     commits what it read, and reports the group's committed offsets.
//   node kafkajs_client.mjs transact BOOTSTRAP TOPIC GROUP
//     creates TOPIC (2 partitions) and runs four transactions with a transactional producer,
//     each sending TXN_RECORDS records per partition: committed; aborted; committed with
//     offsets for GROUP (sendOffsets); aborted with other offsets for GROUP. Reports what each
//     sent.
//   node kafkajs_client.mjs acls BOOTSTRAP PRINCIPAL
//     creates two ACLs of PRINCIPAL (Write on topics prefixed "kjs-", Read on group
//     "kjs-group"), describes PRINCIPAL's ACLs, then deletes its topic ACLs; reports
//     {created, described, deleted} as kafkajs returns them.
//
// Each prints one JSON object on stdout; kafkajs's own log goes to stderr. The Python test
// asserts on the JSON; this script checks nothing itself beyond exiting non-zero on an error.

import { createRequire } from "node:module";
import process from "node:process";

// kafkajs lives in the repository root's node_modules (package.json there; tools/install-dev
// installs it), so it is resolved from the root whatever the working directory.
const require = createRequire(new URL("../../package.json", import.meta.url));
const {
  Kafka,
  CompressionTypes,
  Partitioners,
  logLevel,
  AclResourceTypes,
  AclOperationTypes,
  AclPermissionTypes,
  ResourcePatternTypes,
} = require("kafkajs");

const PARTITIONS = 2;
const RECORDS = 15;
const CONSUME_TIMEOUT_MS = 45000;

const [phase, bootstrap, topic, group, countText] = process.argv.slice(2);

const kafka = new Kafka({
  clientId: "brook-kafkajs-compat",
  brokers: bootstrap.split(","),
  connectionTimeout: 10000,
  requestTimeout: 20000,
  retry: { retries: 8, initialRetryTime: 200, maxRetryTime: 3000 },
  logLevel: logLevel.WARN,
  logCreator:
    () =>
    ({ namespace, level, log }) =>
      process.stderr.write(`${level} ${namespace} ${JSON.stringify(log)}\n`),
});

function recordsOf(partition, send) {
  return Array.from({ length: RECORDS }, (_, i) => i)
    .filter((i) => i % 3 === send)
    .map((i) => ({
      partition,
      key: `key-${partition}-${i}`,
      value: `${topic} value ${partition}.${i}`,
      // A repeated header (an array in kafkajs) must come back as sent, in order.
      headers: { index: String(i), trace: ["a", "b"] },
    }));
}

async function createTopic() {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const created = await admin.createTopics({
      topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
      waitForLeaders: true,
      timeout: 20000,
    });
    return { created, ...(await admin.fetchTopicMetadata({ topics: [topic] })) };
  } finally {
    await admin.disconnect();
  }
}

async function fetchGroupOffsets() {
  const admin = kafka.admin();
  await admin.connect();
  try {
    return await admin.fetchOffsets({ groupId: group, topics: [topic] });
  } finally {
    await admin.disconnect();
  }
}

async function produce() {
  const metadata = await createTopic();
  const producer = kafka.producer({
    allowAutoTopicCreation: false,
    // Every message names its partition; naming the partitioner only silences its warning.
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  await producer.connect();
  const sends = [];
  try {
    const plans = [
      { acks: -1, compression: CompressionTypes.None, name: "acks=-1" },
      { acks: 1, compression: CompressionTypes.None, name: "acks=1" },
      { acks: -1, compression: CompressionTypes.GZIP, name: "acks=-1 gzip" },
    ];
    for (const [send, plan] of plans.entries()) {
      const messages = [0, 1].flatMap((p) => recordsOf(p, send));
      const results = await producer.send({
        topic,
        messages,
        acks: plan.acks,
        compression: plan.compression,
      });
      sends.push({
        name: plan.name,
        sent: messages.map(({ partition, key }) => ({ partition, key })),
        results: results.map(({ partition, errorCode, baseOffset }) => ({
          partition,
          errorCode,
          baseOffset: Number(baseOffset),
        })),
      });
    }
  } finally {
    await producer.disconnect();
  }
  return { metadata, sends };
}

function headerText(value) {
  return Array.isArray(value) ? value.map((v) => v.toString()) : [value.toString()];
}

async function consume() {
  const count = Number(countText);
  const consumer = kafka.consumer({
    groupId: group,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 500,
  });
  const messages = [];
  await consumer.connect();
  try {
    // kafkajs reads READ_COMMITTED unless readUncommitted is set: aborted records and open
    // transactions must stay invisible.
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`read ${messages.length} of ${count} in ${CONSUME_TIMEOUT_MS} ms`)),
        CONSUME_TIMEOUT_MS,
      );
      consumer.on(consumer.events.CRASH, ({ payload }) => reject(payload.error));
      consumer
        .run({
          autoCommit: false,
          eachMessage: async ({ partition, message }) => {
            messages.push({
              partition,
              offset: Number(message.offset),
              key: message.key.toString(),
              value: message.value.toString(),
              headers: Object.fromEntries(
                Object.entries(message.headers).map(([n, v]) => [n, headerText(v)]),
              ),
            });
            await consumer.commitOffsets([
              { topic, partition, offset: String(Number(message.offset) + 1) },
            ]);
            if (messages.length >= count) {
              clearTimeout(timer);
              resolve();
            }
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return { messages, committed: await fetchGroupOffsets() };
}

const TXN_RECORDS = 3;
// What each transaction does: commit or abort, and the offset it sends for GROUP (none: -1).
const TRANSACTIONS = [
  { name: "committed", commit: true, groupOffset: -1 },
  { name: "aborted", commit: false, groupOffset: -1 },
  { name: "committed-with-offsets", commit: true, groupOffset: 5 },
  { name: "aborted-with-offsets", commit: false, groupOffset: 99 },
];

async function transact() {
  await createTopic();
  const producer = kafka.producer({
    transactionalId: `${topic}-txn`,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  await producer.connect();
  const transactions = [];
  try {
    for (const plan of TRANSACTIONS) {
      const messages = Array.from({ length: PARTITIONS }, (_, p) => p).flatMap((partition) =>
        Array.from({ length: TXN_RECORDS }, (_, i) => ({
          partition,
          key: `key-${partition}-${i}`,
          value: `${topic} ${plan.name} ${partition}.${i}`,
          headers: { transaction: plan.name },
        })),
      );
      const transaction = await producer.transaction();
      try {
        await transaction.send({ topic, messages });
        if (plan.groupOffset >= 0) {
          await transaction.sendOffsets({
            consumerGroupId: group,
            topics: [
              {
                topic,
                partitions: Array.from({ length: PARTITIONS }, (_, partition) => ({
                  partition,
                  offset: String(plan.groupOffset),
                })),
              },
            ],
          });
        }
      } catch (error) {
        await transaction.abort();
        throw error;
      }
      await (plan.commit ? transaction.commit() : transaction.abort());
      transactions.push({
        ...plan,
        sent: messages.map(({ partition, key, value }) => ({ partition, key, value })),
      });
    }
  } finally {
    await producer.disconnect();
  }
  return { transactions };
}

// The acls phase names the principal where the others name the topic.
async function acls() {
  const principal = topic;
  const admin = kafka.admin();
  await admin.connect();
  try {
    const created = await admin.createAcls({
      acl: [
        {
          resourceType: AclResourceTypes.TOPIC,
          resourceName: "kjs-",
          resourcePatternType: ResourcePatternTypes.PREFIXED,
          principal,
          host: "*",
          operation: AclOperationTypes.WRITE,
          permissionType: AclPermissionTypes.ALLOW,
        },
        {
          resourceType: AclResourceTypes.GROUP,
          resourceName: "kjs-group",
          resourcePatternType: ResourcePatternTypes.LITERAL,
          principal,
          host: "*",
          operation: AclOperationTypes.READ,
          permissionType: AclPermissionTypes.ALLOW,
        },
      ],
    });
    const described = await admin.describeAcls({
      resourceType: AclResourceTypes.ANY,
      resourcePatternType: ResourcePatternTypes.ANY,
      principal,
      operation: AclOperationTypes.ANY,
      permissionType: AclPermissionTypes.ANY,
    });
    const deleted = await admin.deleteAcls({
      filters: [
        {
          resourceType: AclResourceTypes.TOPIC,
          resourcePatternType: ResourcePatternTypes.ANY,
          principal,
          operation: AclOperationTypes.ANY,
          permissionType: AclPermissionTypes.ANY,
        },
      ],
    });
    return { created, described, deleted };
  } finally {
    await admin.disconnect();
  }
}

const phases = { produce, consume, transact, acls };
try {
  if (!(phase in phases)) throw new Error(`unknown phase ${phase}`);
  process.stdout.write(`${JSON.stringify(await phases[phase]())}\n`);
} catch (error) {
  process.stderr.write(`kafkajs_client: ${error.stack ?? error}\n`);
  process.exitCode = 1;
}
