"""Numbered, append-only SQL migrations with a version row, applied on start."""

from pathlib import Path

import psycopg

MIGRATIONS = Path(__file__).parent / "migrations"


def migrate(database_url: str, schema: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        # One migrator at a time, whichever process starts first.
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"sumi-migrate-{schema}",))
        try:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f'SET search_path TO "{schema}"')
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_version")}
            for path in sorted(MIGRATIONS.glob("*.sql")):
                version = int(path.name.split("_", 1)[0])
                if version in done:
                    continue
                with conn.transaction():
                    conn.execute(path.read_text())
                    conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (f"sumi-migrate-{schema}",))


def drop(database_url: str, schema: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
