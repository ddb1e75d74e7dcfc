"""Sealed documents and the ring of data keys that opens them (crypto-shredding, docs/decisions.md).

A document on the workflow log is sealed with AES-256-GCM under a data key that lives only on
the compacted key topic (`<prefix>.workflow.keys`). A purge writes the key's tombstone: the
ciphertext left on the other, never-compacted logs can then no longer be opened by anyone,
the Host and an auditor alike.

A sealed document is a string of its own form in the same Avro field as a plain one:
`sealed1:<keyId>:<base64url(nonce | ciphertext | tag)>`. A canonical JSON text never starts
with `s` (only `{ [ " - 0-9 t f n`), so records written before sealing existed stay readable
as they are and need no schema change. The key ID is authenticated with the ciphertext, so a
sealed document moved under another key's name does not open.

Keys are Host secrets: `DataKey.key` is left out of its repr, and nothing here logs.
"""

import base64
import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from sumi.core import records as r

PREFIX = "sealed1:"
KEY_BYTES = 32
NONCE_BYTES = 12  # random per seal: 2^32 seals per key stay far below GCM's collision bound


def new_key(key_id: str, workflow_uid: str, instance_id: str, now: int, sequence: int | None = None) -> r.DataKey:
    return r.DataKey(key_id, workflow_uid, instance_id, AESGCM.generate_key(bit_length=8 * KEY_BYTES), now, sequence)


def is_sealed(text: str | None) -> bool:
    return text is not None and text.startswith(PREFIX)


def key_id_of(text: str) -> str:
    """The key a sealed document names (what a reader must hold to open it)."""
    return text[len(PREFIX) :].split(":", 1)[0]


def seal(key: r.DataKey, text: str) -> str:
    nonce = os.urandom(NONCE_BYTES)
    body = AESGCM(key.key).encrypt(nonce, text.encode("utf-8"), key.keyId.encode())
    return f"{PREFIX}{key.keyId}:{base64.urlsafe_b64encode(nonce + body).decode()}"


def unseal(key: r.DataKey, text: str) -> str | None:
    """The plain document, or None when `text` is not a document sealed under `key`."""
    if not is_sealed(text) or key_id_of(text) != key.keyId:
        return None
    try:
        raw = base64.urlsafe_b64decode(text[len(PREFIX) :].split(":", 1)[1])
        plain = AESGCM(key.key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], key.keyId.encode())
        return plain.decode("utf-8")
    except (IndexError, ValueError, InvalidTag):
        return None


@dataclass
class KeyRing:
    """The data keys still alive: the fold of the key topic (a tombstone drops its key), with
    the indexes a purge needs (every key of an instance, of a Workflow).

    Held per instance, for as long as the instance is retained: so an instance's one key is a
    string in `of_instance` (a set only once an event has a key too), the instance's key is
    named by the same (workflow UID, instance ID) tuple, and a Workflow's UID is held once."""

    keys: dict[str, r.DataKey] = field(default_factory=dict)
    of_instance: dict[tuple[str, str], str | set[str]] = field(default_factory=dict)  # key ID(s)
    # (wf, id) -> the instance's key ID; (wf, id, seq) -> an event's
    named: dict[tuple[str, str] | tuple[str, str, int], str] = field(default_factory=dict)

    def fold(self, key_id: str, value: r.Record | None) -> None:
        """One record of the key topic under its key: a tombstone (None) drops the key; only a
        DataKey of that same ID adds one (anything else on the topic is no key of ours)."""
        if value is None:
            self.drop(key_id)
        elif isinstance(value, r.DataKey) and value.keyId == key_id:
            self.add(value)

    def add(self, key: r.DataKey) -> None:
        if sys.intern(key.workflowUid) is not key.workflowUid:
            key = dataclasses.replace(key, workflowUid=sys.intern(key.workflowUid))
        self.keys[key.keyId] = key
        owner = (key.workflowUid, key.instanceId)
        held = self.of_instance.get(owner)
        if held is None or held == key.keyId:
            self.of_instance[owner] = key.keyId
        elif isinstance(held, str):
            self.of_instance[owner] = {held, key.keyId}
        else:
            held.add(key.keyId)
        self.named[owner if key.sequence is None else (*owner, key.sequence)] = key.keyId

    def drop(self, key_id: str) -> None:
        key = self.keys.pop(key_id, None)
        if key is None:
            return
        owner = (key.workflowUid, key.instanceId)
        held = self.of_instance.get(owner)
        if held == key_id:
            del self.of_instance[owner]
        elif isinstance(held, set):
            held.discard(key_id)
            if len(held) == 1:
                self.of_instance[owner] = held.pop()
        name = owner if key.sequence is None else (*owner, key.sequence)
        if self.named.get(name) == key_id:
            del self.named[name]

    def key_for(self, workflow_uid: str, instance_id: str, sequence: int | None = None) -> r.DataKey | None:
        """The instance's key (sequence None) or one event's key, while it lives."""
        name = (workflow_uid, instance_id) if sequence is None else (workflow_uid, instance_id, sequence)
        key_id = self.named.get(name)
        return None if key_id is None else self.keys.get(key_id)

    def keys_of(self, workflow_uid: str, instance_id: str) -> list[str]:
        return sorted(_ids(self.of_instance.get((workflow_uid, instance_id))))

    def keys_of_workflow(self, workflow_uid: str, instances: Callable[[str], bool] | None = None) -> list[str]:
        """Every key of the Workflow's instances (those whose ID `instances` takes)."""
        return sorted(
            k
            for (wf, iid), ids in self.of_instance.items()
            if wf == workflow_uid and (instances is None or instances(iid))
            for k in _ids(ids)
        )

    def open(self, text: str | None) -> str | None:
        """A document as the log holds it, opened: plain text as is; sealed text with its key,
        or None once the key is gone (purged) or when it does not open."""
        if text is None or not is_sealed(text):
            return text
        key = self.keys.get(key_id_of(text))
        return None if key is None else unseal(key, text)


def _ids(held: str | set[str] | None) -> set[str] | tuple[str, ...]:
    return (held,) if isinstance(held, str) else held or ()


# The document fields of each record type (DOC-5 documents, and the worker's error messages).
SEALED: dict[type, tuple[str, ...]] = {
    r.InstanceCreated: ("params",),
    r.StepAttemptCommitted: ("result", "errorMessage"),
    r.EventAccepted: ("payload",),
    r.InstanceStatusChanged: ("output", "errorMessage"),
}


def owner(rec: Any) -> tuple[str, str, int | None]:
    """Whose key seals a record's documents: its instance's, or (an event's payload) its event's."""
    sequence = rec.sequence if isinstance(rec, r.EventAccepted) else None
    return rec.workflowUid, rec.instanceId, sequence


def documents(rec: Any) -> dict[str, str]:
    """A record's document fields that hold a value."""
    return {f: v for f in SEALED.get(type(rec), ()) if (v := getattr(rec, f)) is not None}


def seal_record(rec: Any, ring: KeyRing) -> Any:
    """The record as the log holds it: its documents sealed with their key."""
    plain = documents(rec)
    key = ring.key_for(*owner(rec)) if plain else None
    if key is None:
        return rec
    return dataclasses.replace(rec, **{f: seal(key, v) for f, v in plain.items()})


def open_record(rec: Any, ring: KeyRing) -> Any:
    """A record read from the log, its documents opened; a field whose key is gone reads as absent."""
    opened = {f: ring.open(v) for f, v in documents(rec).items() if is_sealed(v)}
    return dataclasses.replace(rec, **opened) if opened else rec


def missing(rec: Any, ring: KeyRing) -> set[str]:
    """The keys a record's sealed fields name that the ring does not hold (yet, or any more)."""
    return {k for v in documents(rec).values() if is_sealed(v) and (k := key_id_of(v)) not in ring.keys}
