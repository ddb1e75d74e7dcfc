-- Bounded storage (sumi_projections._prune): a settled message keeps its row, without its body,
-- until SUMI_SETTLED_RETENTION_SECONDS after its settlement, then the row leaves. The stats'
-- cumulative counters live in queue_counters, which no prune touches, so they stay exact.
ALTER TABLE queue_messages ADD COLUMN settled_at timestamptz;
-- Rows settled before this migration have no settlement time: their acceptance stands in for
-- it, so they leave too (a rebuild then has them gone as well; see docs/decisions.md).
UPDATE queue_messages SET settled_at = accepted_at, body = ''::bytea
  WHERE state IN ('acknowledged', 'deadlettered', 'discarded');
CREATE INDEX queue_messages_settled ON queue_messages (settled_at) WHERE settled_at IS NOT NULL;

-- How far each prune has reached: rows of `what` settled before `before` are gone. The audit
-- (`sumi replay`) prunes its rebuilt schema to the same marks before it compares.
CREATE TABLE prune_marks (
  what    text PRIMARY KEY,
  before  timestamptz NOT NULL
);
