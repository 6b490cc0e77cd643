-- The secret runners present to each other's endpoint (src/cluster/Cluster.ts): every process
-- sharing this database reads it, nobody configures it. 244 random bits from two v4 UUIDs.
CREATE TABLE cluster_secret (
  id     integer PRIMARY KEY CHECK (id = 1),
  secret text NOT NULL
);
INSERT INTO cluster_secret (id, secret)
VALUES (1, replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
