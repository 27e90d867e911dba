-- Each function has one current text (storage/postgres/functions/), applied after the
-- table migrations. 0008 had renamed 0005's sluice_txn_init and sluice_txn_add and wrapped
-- them; the current ones are whole again, the wrapped ones go.
DROP FUNCTION IF EXISTS sluice_txn_init_0005(text, bigint, bigint, integer, bigint);
DROP FUNCTION IF EXISTS sluice_txn_add_0005(
    text, bigint, integer, uuid[], integer[], text[], bigint
);
