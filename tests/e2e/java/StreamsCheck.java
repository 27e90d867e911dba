// Kafka Streams (kafka-streams from Maven Central) against Sluice: a word count with
// processing.guarantee=exactly_once_v2 (transaction version 2, KIP-447 offsets), run as a
// single-file source program (compiled once) by tests/e2e/test_kafka_streams.py, which SIGKILLs it
// mid-stream and starts it again. Args: <bootstrap> <application id> <input> <output>
// <state dir> <ms per input line>. Prints {"running": true} once the instance runs; runs until killed.

import java.util.*;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.*;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;

public class StreamsCheck {
    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3], stateDir = args[4];
        long pauseMs = Long.parseLong(args[5]);
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        // One output record per input record (no cache): exactly once is then checkable per word.
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        // In-memory stores: a restarted instance rebuilds its counts from the changelog.
        p.put(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG, BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers.class);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.consumerPrefix("max.poll.records"), "50");
        // The broker's minimum session timeout (group.min.session.timeout.ms) instead of 45 s:
        // the killed instance's member leaves the group 6 s after the kill, so the restarted
        // one's rebalance does not wait 45 s for it.
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), "6000");
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), "1500");

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
            // Slowed down, so that the test's kill lands while transactions are open.
            .peek((key, line) -> {
                try {
                    Thread.sleep(pauseMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            })
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word)
            .count()
            .toStream()
            .mapValues(Object::toString)
            .to(output);

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("{\"running\": true}");
                System.out.flush();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        Thread.sleep(Long.MAX_VALUE);
    }
}
