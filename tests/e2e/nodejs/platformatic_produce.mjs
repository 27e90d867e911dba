// Produce with @platformatic/kafka as an application would:
//   node platformatic_produce.mjs <bootstrap> <topic> <count> <prefix>
// An idempotent producer; one send per record to partition 0. Prints one JSON line:
// {"sent": n, "producerId": "..."} or {"error": "..."}.
import { Producer, stringSerializers } from "@platformatic/kafka";

const [bootstrap, topic, count, prefix] = process.argv.slice(2);
const producer = new Producer({
  clientId: `platformatic-${prefix}`,
  bootstrapBrokers: [bootstrap],
  serializers: stringSerializers,
  idempotent: true,
  autocreateTopics: false,
});
try {
  let sent = 0;
  for (let i = 0; i < Number(count); i += 1) {
    await producer.send({
      messages: [{ topic, key: `${prefix}-${i}`, value: `${prefix}-${i}`, partition: 0 }],
    });
    sent += 1;
  }
  console.log(JSON.stringify({ sent, producerId: String(producer.producerId) }));
  await producer.close();
} catch (err) {
  console.log(JSON.stringify({ error: String(err?.message ?? err) }));
  await producer.close().catch(() => {});
  process.exit(1);
}
