-- Records the processors set aside (topic quarantine): one row per processor and source record,
-- so a record quarantined twice (a projection that crashed before its offset moved) counts once.
CREATE TABLE quarantined (
  processor        text NOT NULL,
  source_topic     text NOT NULL,
  source_partition integer NOT NULL,
  source_offset    bigint NOT NULL,
  reason           text NOT NULL,
  detail           text NOT NULL,
  size             integer,
  quarantined_at   timestamptz NOT NULL,
  PRIMARY KEY (processor, source_topic, source_partition, source_offset)
);
