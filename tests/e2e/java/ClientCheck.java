// The Apache Kafka Java client (kafka-clients from Maven Central) against Sluice: a
// single-file source program (java -cp <kafka jars> ClientCheck.java <bootstrap> <topic>
// <mode>), which tests/e2e/test_java_client.py compiles once and runs. Prints one JSON line of what it saw; exits 1 on
// any client exception, with the exception on stderr.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class ClientCheck {
    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Throwable e) {
            // Printed here: the source launcher's own trace of it can fail (JDK-8311830).
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], mode = args[2];
        switch (mode) {
            case "admin" -> admin(bootstrap, topic, args.length > 3 ? args[3] : "");
            case "idempotent" -> idempotent(bootstrap, topic, Integer.parseInt(args[3]));
            case "transactions" -> transactions(bootstrap, topic);
            case "ctp" -> consumeTransformProduce(bootstrap, topic, args[3], Integer.parseInt(args[4]));
            case "hang" -> hang(bootstrap, topic, args[3]);
            case "fence" -> fence(bootstrap, topic, args[3]);
            case "consume" -> consume(bootstrap, topic, args[3], args[4], Integer.parseInt(args[5]),
                args.length > 6 ? args[6] : "classic");
            case "member" -> member(bootstrap, topic, args[3], args[4], args[5].equals("commit"));
            default -> throw new IllegalArgumentException(mode);
        }
    }

    static void admin(String bootstrap, String topic, String kind) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            Map<String, String> configs = new HashMap<>();
            if (kind.equals("classic")) configs.put("diskless.enable", "false");
            admin.createTopics(List.of(new NewTopic(topic, Optional.of(3), Optional.empty()).configs(configs)))
                .all().get();
            DescribeClusterResult cluster = admin.describeCluster();
            int brokers = cluster.nodes().get().size();
            String clusterId = cluster.clusterId().get();
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            Set<String> names = admin.listTopics().names().get();
            System.out.printf(
                "{\"brokers\": %d, \"cluster_id\": \"%s\", \"partitions\": %d, \"listed\": %b}%n",
                brokers, clusterId, d.partitions().size(), names.contains(topic));
        }
    }

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        return p;
    }

    static void idempotent(String bootstrap, String topic, int n) throws Exception {
        try (Producer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap))) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "k" + i, "idem-" + i)));
            }
            long offsets = 0;
            for (var f : sent) offsets += f.get().hasOffset() ? 1 : 0;
            System.out.printf("{\"acknowledged\": %d}%n", offsets);
        }
    }

    static void transactions(String bootstrap, String topic) throws Exception {
        Properties p = producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-check-" + topic);
        try (Producer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic, "c" + i, "committed-" + i));
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic, "a" + i, "aborted-" + i));
            producer.flush();
            producer.abortTransaction();
        }
        // Transaction version 2 (KIP-890 part 2) bumps the epoch at every end: 2 after the
        // commit and the abort of a new id; version 1 keeps epoch 0.
        System.out.printf("{\"committed\": 10, \"aborted\": 10, \"epoch\": %d}%n",
            producerEpoch(bootstrap, "java-check-" + topic));
    }

    static int producerEpoch(String bootstrap, String transactionalId) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            return admin.describeTransactions(List.of(transactionalId)).description(transactionalId)
                .get().producerEpoch();
        }
    }

    // Consume-transform-produce: the topic's committed values, upper-cased into topic-out,
    // each batch with its input offsets in the transaction (sendOffsetsToTransaction with the
    // group's metadata, KIP-447); every third transaction is aborted and its input read again.
    static void consumeTransformProduce(String bootstrap, String topic, String group, int expected)
            throws Exception {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "7");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        Properties p = producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-ctp-" + topic);
        int done = 0, transactions = 0, aborted = 0;
        try (Consumer<String, String> consumer = new KafkaConsumer<>(c);
             Producer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 90_000;
            while (done < expected && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) continue;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    producer.send(new ProducerRecord<>(topic + "-out", r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                if (++transactions % 3 == 0) {
                    producer.abortTransaction();
                    aborted++;
                    // Read the batch again: from the group's committed offsets (or the start).
                    Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(offsets.keySet());
                    for (TopicPartition tp : offsets.keySet()) {
                        OffsetAndMetadata at = committed.get(tp);
                        if (at == null) consumer.seekToBeginning(List.of(tp));
                        else consumer.seek(tp, at.offset());
                    }
                } else {
                    producer.commitTransaction();
                    done += records.count();
                }
            }
        }
        System.out.printf("{\"processed\": %d, \"aborted_transactions\": %d}%n", done, aborted);
    }

    // A producer killed mid-transaction: its records are sent (flushed) and it waits to be
    // killed; "fence" is the next instance with the same transactional id.
    static void hang(String bootstrap, String topic, String transactionalId) throws Exception {
        Properties p = producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "600000");
        Producer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        producer.beginTransaction();
        for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic, "h" + i, "hung-" + i));
        producer.flush();
        System.out.println("{\"ready\": true}");
        System.out.flush();
        Thread.sleep(600_000);
    }

    // The next instance: initTransactions aborts the killed one's transaction; it commits its
    // own records. A zombie of this instance (a third producer's init fences it) cannot commit.
    static void fence(String bootstrap, String topic, String transactionalId) throws Exception {
        Properties p = producerProps(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        boolean fenced = false;
        try (Producer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic, "n" + i, "next-" + i));
            producer.commitTransaction();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, "z", "zombie")).get();
            try (Producer<String, String> successor = new KafkaProducer<>(p)) {
                successor.initTransactions();
                try {
                    producer.commitTransaction();
                } catch (org.apache.kafka.common.errors.ProducerFencedException
                         | org.apache.kafka.common.errors.InvalidProducerEpochException e) {
                    fenced = true;
                }
            }
        } catch (org.apache.kafka.common.KafkaException e) {
            if (!fenced) throw e;
        }
        System.out.printf("{\"committed\": 10, \"fenced\": %b}%n", fenced);
    }

    static void consume(String bootstrap, String topic, String group, String isolation, int expected,
                        String protocol) {
        Properties p = groupConsumer(bootstrap, group, protocol);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        List<String> values = new ArrayList<>();
        try (Consumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (values.size() < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    values.add(r.value());
                }
            }
            // A few more polls: nothing beyond what was expected may arrive.
            for (int i = 0; i < 4; i++) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    values.add(r.value());
                }
            }
            consumer.commitSync();
            Map<TopicPartition, OffsetAndMetadata> committed =
                consumer.committed(consumer.assignment());
            long sum = committed.values().stream().filter(Objects::nonNull).mapToLong(OffsetAndMetadata::offset).sum();
            StringBuilder json = new StringBuilder("{\"values\": [");
            for (int i = 0; i < values.size(); i++) {
                if (i > 0) json.append(", ");
                json.append('"').append(values.get(i)).append('"');
            }
            json.append("], \"committed_sum\": ").append(sum).append("}");
            System.out.println(json);
        }
    }

    // A group member for tests/e2e/_groups.py's MemberProcess: subscribes (group.protocol
    // as given), reports one JSON line per event on stdout as tests/e2e/_group_member.py
    // does (ready, assigned/revoked, assignment, record, commit_failed, closed), commits
    // each record's offset synchronously before reporting it with commit, and closes
    // cleanly (leaving the group) on a "stop" line or the end of stdin.
    static void member(String bootstrap, String topic, String group, String protocol, boolean commit)
            throws Exception {
        Properties p = groupConsumer(bootstrap, group, protocol);
        final boolean[] stop = {false};
        Thread watcher = new Thread(() -> {
            try (Scanner in = new Scanner(System.in)) {
                while (in.hasNextLine() && !in.nextLine().trim().equals("stop")) { }
            }
            synchronized (stop) { stop[0] = true; }
        });
        watcher.setDaemon(true);
        watcher.start();
        try (Consumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    emit("revoked", parts);
                }
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    emit("assigned", parts);
                }
            });
            System.out.println("{\"event\": \"ready\"}");
            List<Integer> last = null;
            while (true) {
                synchronized (stop) { if (stop[0]) break; }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                List<Integer> now = partitions(consumer.assignment());
                if (!now.equals(last)) {
                    last = now;
                    emit("assignment", consumer.assignment());
                }
                for (ConsumerRecord<String, String> r : records) {
                    if (commit) {
                        try {
                            consumer.commitSync(Map.of(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1)));
                        } catch (Exception e) {  // e.g. during a rebalance: the record comes again
                            System.out.printf("{\"event\": \"commit_failed\", \"error\": \"%s\"}%n",
                                e.getClass().getSimpleName());
                        }
                    }
                    System.out.printf("{\"event\": \"record\", \"partition\": %d, \"offset\": %d, \"value\": \"%s\"}%n",
                        r.partition(), r.offset(), r.value());
                }
                System.out.flush();
            }
        }
        System.out.println("{\"event\": \"closed\"}");
        System.out.flush();
    }

    // A group consumer from the earliest offset, committing itself, string records;
    // protocol "consumer": KIP-848's group protocol (the broker assigns; ConsumerGroupHeartbeat).
    static Properties groupConsumer(String bootstrap, String group, String protocol) {
        Properties p = new Properties();
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }

    static List<Integer> partitions(Collection<TopicPartition> parts) {
        List<Integer> ps = new ArrayList<>();
        for (TopicPartition tp : parts) ps.add(tp.partition());
        Collections.sort(ps);
        return ps;
    }

    static void emit(String event, Collection<TopicPartition> parts) {
        System.out.println("{\"event\": \"" + event + "\", \"partitions\": " + partitions(parts) + "}");
        System.out.flush();
    }
}
