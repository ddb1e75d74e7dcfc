-- Delivery state of the queue log (QueueConsumer 0.3.0): every record of a message lives in
-- its queue's partition, so the offset of the last record applied to a row makes each
-- record apply at most once (a replay of an already applied record changes nothing).
ALTER TABLE queue_messages ADD COLUMN last_offset bigint NOT NULL DEFAULT -1;
UPDATE queue_messages SET last_offset = log_offset;
-- The open batch holding an in-flight message (audit and the dashboard).
ALTER TABLE queue_messages ADD COLUMN batch_id text;
CREATE INDEX queue_messages_live ON queue_messages (queue_uid, state)
  WHERE state IN ('pending', 'inflight');
