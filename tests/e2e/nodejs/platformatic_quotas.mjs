// Client quotas with @platformatic/kafka's admin client (Python's stock clients lack them):
//   node platformatic_quotas.mjs <bootstrap> alter '<entries JSON>'
//   node platformatic_quotas.mjs <bootstrap> describe '<components JSON>'
// Prints one JSON line: the client's answer, or {"error": "..."}.
import { Admin } from "@platformatic/kafka";

const [bootstrap, action, payload] = process.argv.slice(2);
const admin = new Admin({ clientId: "platformatic-quotas", bootstrapBrokers: [bootstrap] });
try {
  const arg = JSON.parse(payload);
  const result =
    action === "alter"
      ? await admin.alterClientQuotas({ entries: arg })
      : await admin.describeClientQuotas({ components: arg });
  console.log(JSON.stringify({ result }));
} catch (err) {
  const cause = err?.errors?.[0] ?? err?.cause ?? err;
  console.log(JSON.stringify({ error: String(err?.message ?? err), detail: String(cause?.message ?? cause) }));
  process.exitCode = 1;
} finally {
  await admin.close().catch(() => {});
}
