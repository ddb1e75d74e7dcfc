-- Every valid value fits (DOC-2, WF-19, WF-34): a read model that refuses one differs from the log.
-- Documents become `json`, which keeps the canonical text as written: `jsonb` refuses the
-- \u0000 escape (and would also reorder keys and fold -0 into 0).
ALTER TABLE resources ALTER COLUMN spec TYPE json USING spec::json,
  ALTER COLUMN observed TYPE json USING observed::json, ALTER COLUMN observed SET DEFAULT '{}',
  ALTER COLUMN output TYPE json USING output::json, ALTER COLUMN output SET DEFAULT '{}';
ALTER TABLE operations ALTER COLUMN error TYPE json USING error::json;
ALTER TABLE decisions ALTER COLUMN problem TYPE json USING problem::json,
  ALTER COLUMN result TYPE json USING result::json;
ALTER TABLE workflow_instances ALTER COLUMN output TYPE json USING output::json;
ALTER TABLE workflow_history ALTER COLUMN data TYPE json USING data::json;

-- From now on every str is stored through sumi.wire.pgtext.encode (U+0000 and U+0001 escaped
-- with U+0001): the U+0001 already stored raw gets its escape, so it reads back as it was.
DO $$
DECLARE c record;
BEGIN
  FOR c IN SELECT table_name, column_name FROM information_schema.columns
           WHERE table_schema = current_schema() AND data_type = 'text'
  LOOP
    EXECUTE format('UPDATE %I SET %I = replace(%I, E''\x01'', E''\x01\x02'') WHERE strpos(%I, E''\x01'') > 0',
                   c.table_name, c.column_name, c.column_name, c.column_name);
  END LOOP;
END $$;
