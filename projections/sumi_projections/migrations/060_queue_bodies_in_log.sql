-- A message's body lives in the queue log only: the row keeps where its MessageAccepted lies
-- (log_partition, log_offset), and a peek reads the body from there (sumi.wire.bodies). The
-- column cost every message its body's bytes twice over (the insert, then the delivery's
-- update copying the row) in the table and the write-ahead log.
ALTER TABLE queue_messages DROP COLUMN body;
