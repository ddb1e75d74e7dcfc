-- Read models of the queue log (sumi.queue): message states for peek and stats.
CREATE TABLE queue_messages (
  message_id       text PRIMARY KEY,
  queue_uid        text NOT NULL,
  space            text NOT NULL,
  body             bytea NOT NULL,
  size             integer NOT NULL,
  accepted_at      timestamptz NOT NULL,
  visible_at       timestamptz NOT NULL,
  attempts         integer NOT NULL DEFAULT 1,
  -- pending (ready or delayed by visible_at) | inflight | acknowledged | deadlettered | discarded
  state            text NOT NULL DEFAULT 'pending',
  log_partition    integer NOT NULL,
  log_offset       bigint NOT NULL,
  principal        text,
  idempotency_key  text
);
CREATE INDEX queue_messages_order ON queue_messages (queue_uid, accepted_at, log_offset);
CREATE INDEX queue_messages_idem ON queue_messages (queue_uid, principal, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

-- Cumulative counters since the queue was created.
CREATE TABLE queue_counters (
  queue_uid      text PRIMARY KEY,
  acknowledged   bigint NOT NULL DEFAULT 0,
  retried        bigint NOT NULL DEFAULT 0,
  dead_lettered  bigint NOT NULL DEFAULT 0,
  discarded      bigint NOT NULL DEFAULT 0
);
