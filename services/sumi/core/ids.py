"""Host-issued identifiers. Resource and Operation IDs derive from the command's
ULID, so re-deciding a command after a crash yields the same IDs."""

from ulid import ULID


def new_ulid() -> str:
    return str(ULID()).lower()


def resource_uid(command_id: str) -> str:
    return f"res_{command_id}"


def operation_id(command_id: str) -> str:
    return f"op_{command_id}"


def message_id(seed: str) -> str:
    return f"msg_{seed}"
