// kafkajs (npm, 2.2.4) over SASL PLAIN on TLS, driven by tests/compat/test_gateway_security.py.
//
//   node kafkajs_sasl_client.mjs BOOTSTRAP CA_FILE USER PASSWORD TOPIC COUNT
//     connects with ssl (CA_FILE trusted) and sasl {mechanism: "plain"}, creates TOPIC (one
//     partition), sends COUNT records, reads them back from the beginning as a group member,
//     and prints {"sent": [...values], "received": [...values]}; if connecting or
//     authenticating fails, prints {"error": <kafkajs error name>, "message": ...} instead.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import process from "node:process";

const require = createRequire(new URL("../../package.json", import.meta.url));
const { Kafka, logLevel } = require("kafkajs");

const CONSUME_TIMEOUT_MS = 30000;
const [bootstrap, caFile, username, password, topic, countText] = process.argv.slice(2);
const count = Number(countText);

const kafka = new Kafka({
  clientId: "brook-kafkajs-sasl",
  brokers: bootstrap.split(","),
  ssl: { ca: [readFileSync(caFile, "utf-8")], rejectUnauthorized: true },
  sasl: { mechanism: "plain", username, password },
  connectionTimeout: 10000,
  requestTimeout: 20000,
  retry: { retries: 2, initialRetryTime: 200, maxRetryTime: 1000 },
  logLevel: logLevel.NOTHING,
});

async function run() {
  const admin = kafka.admin();
  await admin.connect();
  try {
    await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
  const sent = Array.from({ length: count }, (_, i) => `${topic} value ${i}`);
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, acks: -1, messages: sent.map((value) => ({ value })) });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: `${topic}-group` });
  const received = [];
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("timed out consuming")), CONSUME_TIMEOUT_MS);
    consumer.run({
      eachMessage: async ({ message }) => {
        received.push(message.value.toString());
        if (received.length >= count) {
          clearTimeout(timer);
          resolve();
        }
      },
    });
  });
  await consumer.disconnect();
  return { sent, received };
}

try {
  process.stdout.write(JSON.stringify(await run()));
} catch (e) {
  process.stdout.write(JSON.stringify({ error: e.name, message: e.message }));
}
process.exit(0);
