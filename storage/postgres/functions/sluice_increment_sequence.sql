-- Kafka's DefaultRecordBatch.incrementSequence: sequences wrap at 2^31-1 to 0.
CREATE OR REPLACE FUNCTION sluice_increment_sequence(seq bigint, increment bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN seq > 2147483647 - increment
                THEN increment - (2147483647 - seq) - 1
                ELSE seq + increment END
$$;
