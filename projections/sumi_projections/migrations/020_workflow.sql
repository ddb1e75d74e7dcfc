-- Read models of the instance log (sumi.workflow): one row per instance, its history rows,
-- and counts per workflow and status. Every record of an instance lives in its instance
-- key's partition, so `last_offset` makes each record apply at most once.
CREATE TABLE workflow_instances (
  workflow_uid   text NOT NULL,
  instance_id    text NOT NULL,
  space          text NOT NULL,
  -- queued | running | sleeping | waiting | complete | errored | terminated (WF-21)
  status         text NOT NULL,
  output         jsonb,
  error_reason   text,
  error_message  text,
  created_at     timestamptz NOT NULL,
  updated_at     timestamptz NOT NULL,
  history_seq    integer NOT NULL DEFAULT 0,
  last_offset    bigint NOT NULL,
  PRIMARY KEY (workflow_uid, instance_id)
);
-- Listing by status pages by instance ID (byte order, so paging is stable).
CREATE INDEX workflow_instances_status ON workflow_instances (workflow_uid, status, instance_id COLLATE "C");
CREATE INDEX workflow_instances_order ON workflow_instances (workflow_uid, instance_id COLLATE "C");

-- The instance's own records in commit order (host-api.md section 5): {seq, type, at, data}.
CREATE TABLE workflow_history (
  workflow_uid  text NOT NULL,
  instance_id   text NOT NULL,
  seq           integer NOT NULL,
  type          text NOT NULL,
  at            timestamptz NOT NULL,
  data          jsonb NOT NULL,
  PRIMARY KEY (workflow_uid, instance_id, seq)
);

-- Workflows whose instances were all purged by the Workflow's delete (WF-13): a UID is never
-- reused, so no later-applied record of another partition may bring an instance back.
CREATE TABLE workflow_purged (
  workflow_uid  text PRIMARY KEY,
  purged_at     timestamptz NOT NULL
);

-- Instances per workflow and status, kept by the trigger below so no writer can forget it.
CREATE TABLE workflow_counts (
  workflow_uid  text NOT NULL,
  status        text NOT NULL,
  n             bigint NOT NULL,
  PRIMARY KEY (workflow_uid, status)
);

CREATE FUNCTION workflow_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE workflow_counts SET n = n - 1 WHERE workflow_uid = OLD.workflow_uid AND status = OLD.status;
    DELETE FROM workflow_counts WHERE workflow_uid = OLD.workflow_uid AND status = OLD.status AND n = 0;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO workflow_counts (workflow_uid, status, n) VALUES (NEW.workflow_uid, NEW.status, 1)
      ON CONFLICT (workflow_uid, status) DO UPDATE SET n = workflow_counts.n + 1;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER workflow_instances_count AFTER INSERT OR DELETE ON workflow_instances
  FOR EACH ROW EXECUTE FUNCTION workflow_count();
-- Most records leave the status as it was: only a change moves a count.
CREATE TRIGGER workflow_instances_recount AFTER UPDATE OF status ON workflow_instances
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION workflow_count();

-- Replays of data-plane writes with an Idempotency-Key look their first decision up by the
-- key-derived prefix of its command ID (gateway/_workflows.py).
CREATE INDEX decisions_command_prefix ON decisions (command_id text_pattern_ops);
