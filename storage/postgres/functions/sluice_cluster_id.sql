-- The first broker to start proposes the id; every later one adopts it.
CREATE OR REPLACE FUNCTION sluice_cluster_id(p_proposed text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    INSERT INTO cluster_meta (key, value) VALUES ('cluster.id', p_proposed)
    ON CONFLICT (key) DO NOTHING;
    SELECT value INTO v FROM cluster_meta WHERE key = 'cluster.id';
    RETURN v;
END
$$;
