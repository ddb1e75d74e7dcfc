"""One typed settings object, read from SUMI_* environment variables."""

import os
from dataclasses import dataclass, field

MIN_WORKFLOW_RETENTION_SECONDS = 2_592_000  # WF-47: terminal histories are kept at least this long


class SettingsError(ValueError):
    """A setting the Host refuses to start with; the message names it."""


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap: str
    database_url: str
    topic_prefix: str = "sumi"
    db_schema: str = "sumi"
    partitions: int = 6
    replication: int = 1  # from the environment: SUMI_KAFKA_BROKERS up to 3 unless set
    # How many Kafka brokers `sumi up` starts on this machine when no SUMI_KAFKA_BOOTSTRAP is
    # given: 1, or a KRaft cluster (3: replication 3, min.insync.replicas 2; sumi.infra).
    kafka_brokers: int = 1
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    # What `sumi up` starts on this machine: a broker (or cluster) on kafka_port unless
    # SUMI_KAFKA_BOOTSTRAP names one, PostgreSQL on pg_port unless SUMI_DATABASE_URL names one.
    kafka_port: int = 9092
    pg_port: int = 5432
    # The JVM options of the broker `sumi up` starts, space-separated; "" = the laptop default
    # (sumi.infra.BROKER_JVM; docs/decisions.md "The embedded broker's JVM" for larger machines).
    kafka_jvm: str = ""
    # How much lower the CPU priority of the services that work through a backlog is (the
    # engines, their runtimes, the projections, the verifier) than the gateway's and control's:
    # past capacity the front door still gets a core to refuse at once (issue 41). 0: the same.
    background_nice: int = 5
    launch_kafka: bool = True
    launch_postgres: bool = True
    decision_timeout: float = 10.0
    # The gateway admits writes that add work (creates, events, sends) while their answers'
    # median stays within this many seconds (sumi.gateway._limits); past it, it refuses some.
    write_latency_target: float = 1.0
    state_dir: str = ".sumi"
    # Worker runtimes (see sumi.runtime._walls and docs/security.md). Python
    # worker code owns its process, so without the OS walls (bubblewrap) it
    # would own the Host: refused unless the operator says so here.
    allow_unwalled_python: bool = False
    runtime_walls: str = ""  # "" = the strongest this machine has; or bwrap, unshare, none
    runtime_memory_mb: int = 4096  # RLIMIT_DATA of the JavaScript runtime process
    # CPU time per invocation of a queue or workflow context (forms.md; what an invocation of a
    # workflow is: docs/decisions.md). The verifier keeps its own, smaller one.
    runtime_cpu_ms: int = 30_000
    # Shared capacity divided among Spaces (sumi.engines.fair): the verifier's concurrent loads.
    verify_slots: int = 8
    verify_slots_per_space: int = 2
    # The workflow engine's live execution contexts (a context waiting inside an effect holds one).
    workflow_contexts: int = 256
    workflow_contexts_per_space: int = 128
    # The gateway refuses creates (of the Spaces sending most) while this many instances wait
    # for a context (sumi.gateway._backlog): a few seconds of work at this machine's capacity.
    workflow_queued_max: int = 128
    workflow_retention_seconds: int = MIN_WORKFLOW_RETENTION_SECONDS  # WF-47
    # Bounded storage (sumi_projections._prune): a settled queue message's row leaves Postgres this
    # long after its settlement (its body at once); a send retried with its Idempotency-Key is
    # recognised for as long. Seven days, like the commands topic's retention. The stats'
    # counters are kept apart and never change with a prune.
    settled_retention_seconds: int = 7 * 86400
    prune_interval_seconds: float = 60.0  # how often the projections service prunes
    # The queue engine's bounded memory (docs/decisions.md, "The queue engine's memory is
    # bounded"): a re-sent append of a message is ignored while its ID is among the last this
    # many settled IDs of its queue; message bodies are held in RAM up to this many bytes, the
    # rest read back from the queue log when delivered. Past this many pending messages a
    # queue holds the rest of its backlog as compact columns (about 90 B each, no body).
    queue_settled_window: int = 100_000
    queue_body_budget_bytes: int = 64 << 20
    queue_hot_messages: int = 10_000
    # An engine snapshots a partition of its log (sumi.engines.snapshots) once this many records
    # (and at least half as many as its last snapshot held) were folded since the last one; a
    # start then folds at most about that many. 0: never (every start folds from offset 0).
    snapshot_records: int = 50_000
    # ...and once a partition folded nothing for this long (and grew by a 64th of what its last
    # snapshot held), so a start after the load ended folds next to nothing.
    snapshot_quiet_seconds: float = 2.0
    workflow_spare_contexts: int = 2  # fresh contexts started ahead of need, per Version lately run
    workflow_always_replay: bool = False  # end a workflow context after every committed step (tests)
    # Every Caller Binding call of a workflow run goes through the log, as one to an instance of
    # another replica's partition does (`sumi.workflow._remote`): so one engine, owning every
    # partition, tests that path. Tests only: needs nonconformant_test_settings.
    workflow_remote_bindings: bool = False
    # Lets a test Host run with settings DurableWorkflow 0.3.0 forbids (a short retention).
    nonconformant_test_settings: bool = False
    # Where fetched artefacts (the broker's jars) live; "" = $XDG_CACHE_HOME/sumi, else ~/.cache/sumi.
    cache_dir: str = ""
    log_level: str = "WARNING"
    # The admin token `sumi up` / `sumi bootstrap` issue ("" = a new one, written to the file;
    # the file "" = STATE_DIR/admin-token). A secret: kept out of repr and out of `to_env`,
    # which no service needs it from.
    admin_token: str = field(default="", repr=False)
    admin_token_file: str = ""
    # `sumi deploy`, a client of a Host: where the Host answers and the token it sends.
    deploy_url: str = "http://127.0.0.1:8080"
    deploy_token: str = field(default="", repr=False)
    # This process's name among the replicas of its service, stable across its restarts: the
    # static member of its consumer groups (KIP-345), so a replica that restarts takes its
    # partitions straight back instead of waiting out its own session. "" = a dynamic member
    # (replicas started by hand or by `compose --scale`); the supervisor names its one of each.
    replica: str = ""
    log_format: str = "text"  # the Host's own log: text, or json (one object per line; sumi.core.logs)

    def __post_init__(self) -> None:
        if self.log_format not in ("text", "json"):
            raise SettingsError(f"SUMI_LOG_FORMAT={self.log_format!r} is neither text nor json")
        if self.workflow_retention_seconds < MIN_WORKFLOW_RETENTION_SECONDS and not self.nonconformant_test_settings:
            raise SettingsError(
                f"SUMI_WORKFLOW_RETENTION_SECONDS={self.workflow_retention_seconds} is under the minimum of "
                f"{MIN_WORKFLOW_RETENTION_SECONDS} s that DurableWorkflow 0.3.0 requires (WF-47); "
                "SUMI_NONCONFORMANT_TEST_SETTINGS=1 allows it for tests only"
            )

        if self.workflow_remote_bindings and not self.nonconformant_test_settings:
            raise SettingsError(
                "SUMI_WORKFLOW_REMOTE_BINDINGS=1 is a test setting; SUMI_NONCONFORMANT_TEST_SETTINGS=1 allows it"
            )

    def nonconformance(self) -> list[str]:
        """Why a Host with these settings is not conformant (allowed by nonconformant_test_settings)."""
        if self.workflow_retention_seconds < MIN_WORKFLOW_RETENTION_SECONDS:
            return [
                f"SUMI_WORKFLOW_RETENTION_SECONDS={self.workflow_retention_seconds} keeps terminal instances "
                f"less than {MIN_WORKFLOW_RETENTION_SECONDS} s (WF-47)"
            ]
        return []

    @classmethod
    def from_env(cls, **overrides: object) -> "Settings":
        env = os.environ
        brokers = _int(env, "SUMI_KAFKA_BROKERS", 1)
        # "replica" (one transaction per replica, on librdkafka) was measured and removed
        # (docs/decisions.md); a setting left from it is refused by name, never ignored.
        _choice(env, "SUMI_TRANSACTIONS", ("partition",))
        values: dict[str, object] = {
            "kafka_bootstrap": env.get("SUMI_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
            "database_url": env.get("SUMI_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
            "topic_prefix": env.get("SUMI_TOPIC_PREFIX", "sumi"),
            "db_schema": env.get("SUMI_DB_SCHEMA", "sumi"),
            "partitions": int(env.get("SUMI_PARTITIONS", "6")),
            "replication": _int(env, "SUMI_REPLICATION", min(brokers, 3)),
            "kafka_brokers": brokers,
            "http_host": env.get("SUMI_HTTP_HOST", "127.0.0.1"),
            "http_port": _port(env, "SUMI_HTTP_PORT", 8080),
            "kafka_port": _port(env, "SUMI_KAFKA_PORT", 9092),
            "pg_port": _port(env, "SUMI_PG_PORT", 5432),
            "kafka_jvm": env.get("SUMI_KAFKA_JVM", ""),
            "background_nice": _int(env, "SUMI_BACKGROUND_NICE", 5),
            "launch_kafka": "SUMI_KAFKA_BOOTSTRAP" not in env,
            "launch_postgres": "SUMI_DATABASE_URL" not in env,
            "decision_timeout": float(env.get("SUMI_DECISION_TIMEOUT", "10")),
            "write_latency_target": float(env.get("SUMI_WRITE_LATENCY_TARGET", "1")),
            "state_dir": env.get("SUMI_STATE_DIR", ".sumi"),
            "allow_unwalled_python": env.get("SUMI_ALLOW_UNWALLED_PYTHON", "") in ("1", "true", "yes"),
            "runtime_walls": env.get("SUMI_RUNTIME_WALLS", ""),
            "runtime_memory_mb": int(env.get("SUMI_RUNTIME_MEMORY_MB", "4096")),
            "runtime_cpu_ms": int(env.get("SUMI_RUNTIME_CPU_MS", "30000")),
            "verify_slots": int(env.get("SUMI_VERIFY_SLOTS", "8")),
            "verify_slots_per_space": int(env.get("SUMI_VERIFY_SLOTS_PER_SPACE", "2")),
            "workflow_contexts": int(env.get("SUMI_WORKFLOW_CONTEXTS", "256")),
            "workflow_contexts_per_space": int(env.get("SUMI_WORKFLOW_CONTEXTS_PER_SPACE", "128")),
            "workflow_queued_max": _int(env, "SUMI_WORKFLOW_QUEUED_MAX", 128),
            "workflow_retention_seconds": _int(env, "SUMI_WORKFLOW_RETENTION_SECONDS", MIN_WORKFLOW_RETENTION_SECONDS),
            "settled_retention_seconds": _int(env, "SUMI_SETTLED_RETENTION_SECONDS", 7 * 86400),
            "prune_interval_seconds": float(env.get("SUMI_PRUNE_INTERVAL_SECONDS", "60")),
            "queue_settled_window": _int(env, "SUMI_QUEUE_SETTLED_WINDOW", 100_000),
            "queue_body_budget_bytes": _int(env, "SUMI_QUEUE_BODY_BUDGET_BYTES", 64 << 20),
            "queue_hot_messages": _int(env, "SUMI_QUEUE_HOT_MESSAGES", 10_000),
            "snapshot_records": _int(env, "SUMI_SNAPSHOT_RECORDS", 50_000),
            "snapshot_quiet_seconds": float(env.get("SUMI_SNAPSHOT_QUIET_SECONDS", "2")),
            "workflow_spare_contexts": _int(env, "SUMI_WORKFLOW_SPARE_CONTEXTS", 2),
            "workflow_always_replay": env.get("SUMI_WORKFLOW_ALWAYS_REPLAY", "") == "1",
            "workflow_remote_bindings": env.get("SUMI_WORKFLOW_REMOTE_BINDINGS", "") == "1",
            "nonconformant_test_settings": env.get("SUMI_NONCONFORMANT_TEST_SETTINGS", "") == "1",
            "cache_dir": env.get("SUMI_CACHE_DIR", ""),
            "log_level": env.get("SUMI_LOG_LEVEL", "WARNING"),
            "admin_token": env.get("SUMI_ADMIN_TOKEN", ""),
            "admin_token_file": env.get("SUMI_ADMIN_TOKEN_FILE", ""),
            "deploy_url": env.get("SUMI_URL", "http://127.0.0.1:8080"),
            "deploy_token": env.get("SUMI_TOKEN", ""),
            "log_format": env.get("SUMI_LOG_FORMAT") or "text",
            "replica": env.get("SUMI_REPLICA", ""),
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]

    def token_file(self) -> str:
        """Where the admin token is written (and read back on a later start)."""
        return self.admin_token_file or os.path.join(self.state_dir, "admin-token")

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}.{name}"

    def to_env(self) -> dict[str, str]:
        """The variables that make a child process see these same settings."""
        return {
            "SUMI_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "SUMI_DATABASE_URL": self.database_url,
            "SUMI_TOPIC_PREFIX": self.topic_prefix,
            "SUMI_DB_SCHEMA": self.db_schema,
            "SUMI_PARTITIONS": str(self.partitions),
            "SUMI_REPLICATION": str(self.replication),
            "SUMI_KAFKA_BROKERS": str(self.kafka_brokers),
            "SUMI_HTTP_HOST": self.http_host,
            "SUMI_HTTP_PORT": str(self.http_port),
            "SUMI_KAFKA_PORT": str(self.kafka_port),
            "SUMI_PG_PORT": str(self.pg_port),
            "SUMI_KAFKA_JVM": self.kafka_jvm,
            "SUMI_BACKGROUND_NICE": str(self.background_nice),
            "SUMI_DECISION_TIMEOUT": str(self.decision_timeout),
            "SUMI_WRITE_LATENCY_TARGET": str(self.write_latency_target),
            "SUMI_STATE_DIR": self.state_dir,
            "SUMI_ALLOW_UNWALLED_PYTHON": "1" if self.allow_unwalled_python else "",
            "SUMI_RUNTIME_WALLS": self.runtime_walls,
            "SUMI_RUNTIME_MEMORY_MB": str(self.runtime_memory_mb),
            "SUMI_RUNTIME_CPU_MS": str(self.runtime_cpu_ms),
            "SUMI_VERIFY_SLOTS": str(self.verify_slots),
            "SUMI_VERIFY_SLOTS_PER_SPACE": str(self.verify_slots_per_space),
            "SUMI_WORKFLOW_CONTEXTS": str(self.workflow_contexts),
            "SUMI_WORKFLOW_CONTEXTS_PER_SPACE": str(self.workflow_contexts_per_space),
            "SUMI_WORKFLOW_QUEUED_MAX": str(self.workflow_queued_max),
            "SUMI_WORKFLOW_RETENTION_SECONDS": str(self.workflow_retention_seconds),
            "SUMI_SETTLED_RETENTION_SECONDS": str(self.settled_retention_seconds),
            "SUMI_PRUNE_INTERVAL_SECONDS": str(self.prune_interval_seconds),
            "SUMI_QUEUE_SETTLED_WINDOW": str(self.queue_settled_window),
            "SUMI_QUEUE_BODY_BUDGET_BYTES": str(self.queue_body_budget_bytes),
            "SUMI_QUEUE_HOT_MESSAGES": str(self.queue_hot_messages),
            "SUMI_SNAPSHOT_RECORDS": str(self.snapshot_records),
            "SUMI_SNAPSHOT_QUIET_SECONDS": str(self.snapshot_quiet_seconds),
            "SUMI_WORKFLOW_SPARE_CONTEXTS": str(self.workflow_spare_contexts),
            "SUMI_WORKFLOW_ALWAYS_REPLAY": "1" if self.workflow_always_replay else "",
            "SUMI_WORKFLOW_REMOTE_BINDINGS": "1" if self.workflow_remote_bindings else "",
            "SUMI_NONCONFORMANT_TEST_SETTINGS": "1" if self.nonconformant_test_settings else "",
            "SUMI_CACHE_DIR": self.cache_dir,
            "SUMI_LOG_LEVEL": self.log_level,
            "SUMI_LOG_FORMAT": self.log_format,
            "SUMI_REPLICA": self.replica,
        }


def default_cache_dir() -> str:
    """Where fetched artefacts live when SUMI_CACHE_DIR says nothing: the XDG cache."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sumi")


def _port(env: "os._Environ[str]", name: str, default: int) -> int:
    text = env.get(name) or str(default)
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise SettingsError(f"{name}={text!r} is not a port number")
    return int(text)


def _int(env: "os._Environ[str]", name: str, default: int) -> int:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not an integer") from None


def _choice(env: "os._Environ[str]", name: str, choices: tuple[str, ...]) -> str:
    """One of `choices`, the first when unset."""
    text = env.get(name) or choices[0]
    if text not in choices:
        raise SettingsError(f"{name}={text!r} is not one of {', '.join(choices)}")
    return text
