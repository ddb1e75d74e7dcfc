-- When each projection last found itself at the end of its topic (for /readyz).
CREATE TABLE projection_status (
  projection     text PRIMARY KEY,
  caught_up_at   timestamptz NOT NULL
);
