-- Read models of the control log (sumi.control). Projections own these tables:
-- a rebuild drops the schema and replays the topics.
CREATE TABLE spaces (
  name        text PRIMARY KEY,
  created_at  timestamptz NOT NULL
);

CREATE TABLE tokens (
  token_hash  text PRIMARY KEY,
  principal   text NOT NULL,
  admin       boolean NOT NULL,
  issued_at   timestamptz NOT NULL
);
CREATE INDEX tokens_principal ON tokens (principal);

CREATE TABLE grants (
  principal   text NOT NULL,
  space       text NOT NULL,
  role        text NOT NULL CHECK (role IN ('viewer', 'editor')),
  PRIMARY KEY (principal, space)
);

CREATE TABLE resources (
  uid         text PRIMARY KEY,
  space       text NOT NULL,
  name        text NOT NULL,
  form        text NOT NULL,
  generation  bigint NOT NULL,
  state       text NOT NULL,
  spec        jsonb NOT NULL,
  observed    jsonb NOT NULL DEFAULT '{}',
  output      jsonb NOT NULL DEFAULT '{}',
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL
);
-- Deleted Resources are removed, so a name is unique among the live ones.
CREATE UNIQUE INDEX resources_space_name ON resources (space, name);
CREATE INDEX resources_space_form ON resources (space, form, uid);

CREATE TABLE operations (
  id            text PRIMARY KEY,
  kind          text NOT NULL,
  space         text NOT NULL,
  resource_uid  text NOT NULL,
  generation    bigint NOT NULL,
  principal     text NOT NULL,
  state         text NOT NULL,
  effect        text NOT NULL,
  error         jsonb,
  created_at    timestamptz NOT NULL,
  updated_at    timestamptz NOT NULL
);

-- The replies the gateway waits for (request-reply by command ID).
CREATE TABLE decisions (
  command_id    text PRIMARY KEY,
  space         text NOT NULL,
  principal     text NOT NULL,
  kind          text NOT NULL,
  accepted      boolean NOT NULL,
  status        integer NOT NULL,
  operation_id  text,
  problem       jsonb,
  result        jsonb,
  decided_at    timestamptz NOT NULL
);

-- Where each projection has got to, written in the same transaction as its rows.
CREATE TABLE projection_offsets (
  projection   text NOT NULL,
  topic        text NOT NULL,
  partition    integer NOT NULL,
  next_offset  bigint NOT NULL,
  PRIMARY KEY (projection, topic, partition)
);
