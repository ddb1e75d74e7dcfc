"""First-start set-up: topics, read-model migrations and the admin token."""

import asyncio
import hashlib
import secrets
import time
from pathlib import Path

import psycopg
from aiokafka import AIOKafkaProducer

from sumi.core import ids
from sumi.core.commands import TokenCreate, submitted
from sumi.core.config import Settings
from sumi.wire import codec, pgtext
from sumi.wire.topics import ADMIN_KEY, ensure_topics, partition_for
from sumi_projections import migrate


async def prepare(settings: Settings) -> None:
    await ensure_topics(settings)
    await asyncio.to_thread(migrate, settings.database_url, settings.db_schema)


def admin_token(settings: Settings, explicit: str | None, token_file: Path) -> tuple[str, bool]:
    """SUMI_ADMIN_TOKEN if set, else the one written on first start, else a new one."""
    if explicit:
        return explicit, False
    if token_file.exists():
        return token_file.read_text().strip(), False
    token = "sumi_" + secrets.token_urlsafe(32)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    return token, True


async def issue_admin_token(settings: Settings, token: str, timeout: float = 60.0) -> None:
    """Issue `token` to principal `admin` through the control log, unless it is known already."""
    token_hash = hashlib.sha256(token.encode()).hexdigest()
    async with await psycopg.AsyncConnection.connect(
        settings.database_url,
        autocommit=True,
        options=f"-c search_path={settings.db_schema}",
        context=pgtext.ADAPTERS,
    ) as conn:
        known = await (await conn.execute("SELECT 1 FROM tokens WHERE token_hash = %s", (token_hash,))).fetchone()
        if known:
            return
        command_id = ids.new_ulid()
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True)
        try:
            await producer.start()
            cmd = submitted(
                TokenCreate(principal="admin", admin=True, token_hash=token_hash),
                command_id=command_id,
                space="",
                principal="admin",
                admin=True,
                now=int(time.time() * 1000),
            )
            await producer.send_and_wait(
                settings.topic("commands"),
                codec.encode(cmd),
                key=ADMIN_KEY.encode(),
                partition=partition_for(ADMIN_KEY, settings.partitions),
            )
        finally:
            await producer.stop()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = await (
                await conn.execute("SELECT accepted FROM decisions WHERE command_id = %s", (command_id,))
            ).fetchone()
            if row:
                return
            await asyncio.sleep(0.05)
        raise TimeoutError("the control processor did not issue the admin token in time")
