-- A pipelined batch's first statement (sumi_projections._owned, `claim`): lock the offsets rows
-- of its partitions in partition order, as `lock` does, and fail the transaction unless each
-- row still holds the offset the replica read it from. The batch's rows follow in the same
-- round trip instead of waiting for the rows to come back and be compared in Python.
CREATE FUNCTION projection_claim(p_projection text, p_topic text, p_partitions integer[], p_offsets bigint[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  held integer;
BEGIN
  SELECT count(*) INTO held
  FROM (SELECT o.partition, o.next_offset FROM projection_offsets o
        WHERE o.projection = p_projection AND o.topic = p_topic AND o.partition = ANY(p_partitions)
        ORDER BY o.partition FOR UPDATE) AS l
  JOIN unnest(p_partitions, p_offsets) AS e(p, o) ON l.partition = e.p AND l.next_offset = e.o;
  IF held <> cardinality(p_partitions) THEN
    RAISE EXCEPTION 'projection %: an offsets row moved on (another replica applied past it)', p_projection
      USING ERRCODE = 'serialization_failure';
  END IF;
END $$;
