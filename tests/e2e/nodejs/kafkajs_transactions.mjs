// A kafkajs transactional producer: one committed and one aborted transaction of `count`
// records each; then a kafkajs consumer (read_committed by default) reads the topic from
// the start for a few seconds. Prints one JSON line: what was produced and consumed.
// usage: node kafkajs_transactions.mjs BOOTSTRAP TOPIC COUNT
import { Kafka, logLevel } from "kafkajs";

const [bootstrap, topic, countText] = process.argv.slice(2);
const count = Number(countText);
const kafka = new Kafka({ clientId: "e2e-kafkajs-txn", brokers: bootstrap.split(","), logLevel: logLevel.ERROR });

const producer = kafka.producer({
  transactionalId: `kafkajs-${topic}`,
  idempotent: true,
  maxInFlightRequests: 1,
});
await producer.connect();
for (const [label, commit] of [["committed", true], ["aborted", false]]) {
  const txn = await producer.transaction();
  await txn.send({
    topic,
    messages: Array.from({ length: count }, (_, i) => ({ value: `${label}-${i}`, partition: i % 2 })),
  });
  if (commit) await txn.commit();
  else await txn.abort();
}
await producer.disconnect();

const consumer = kafka.consumer({ groupId: `kafkajs-${topic}` });
await consumer.connect();
await consumer.subscribe({ topic, fromBeginning: true });
const values = [];
await consumer.run({ eachMessage: async ({ message }) => { values.push(message.value.toString()); } });
const deadline = Date.now() + 20000;
while (Date.now() < deadline && values.length < count) await new Promise((r) => setTimeout(r, 100));
await new Promise((r) => setTimeout(r, 1000)); // anything extra (an aborted record) shows up
await consumer.disconnect();
console.log(JSON.stringify({ values }));
