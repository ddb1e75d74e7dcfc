"""The workflow engine's instance table of one partition as snapshot chunks, and back.

Pure but for the data keys. A snapshot holds each live instance's fold (`_state.Instance`)
and the latest decided command IDs; restoring it and folding the instance log after the
offset it covers gives the table the whole fold gives.

Documents stay sealed as on the log: params, outputs, step results and error messages under
the instance's data key, an event's payload under its event's key (sumi.core.sealing). A purge
tombstones those keys, so a snapshot written before it can no longer be opened either
(crypto-shredding holds for snapshots as for the log); a document whose key is gone restores
as absent, as the fold reads it. A document the log holds unsealed (no key was made for it)
is held unsealed here too.
"""

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sumi.core import sealing
from sumi.core.records import DataKey, WorkflowSnapshotChunk
from sumi.workflow.rules._state import Event, Instance, Step, Timer, settled

CHUNK_BYTES = 512 << 10
_PER_INSTANCE = 160  # the fields beside the documents, about


def _seal(key: DataKey | None, text: str | None) -> str | None:
    return text if text is None or key is None else sealing.seal(key, text)


def fold_of(key: str, inst: Instance, ring: sealing.KeyRing) -> dict[str, Any]:
    """One instance as an InstanceFold record, its documents sealed."""
    own = ring.key_for(inst.workflow_uid, inst.instance_id)
    reason, message = inst.error if inst.error is not None else (None, None)
    return {
        "key": key,
        "workflowUid": inst.workflow_uid,
        "instanceId": inst.instance_id,
        "space": inst.space,
        "params": _seal(own, inst.params),
        "createdAt": inst.created_at,
        "status": inst.status,
        "output": _seal(own, inst.output),
        "errorReason": reason,
        "errorMessage": _seal(own, message),
        "owner": inst.owner,
        "contexts": inst.contexts,
        "versionUid": inst.version_uid,
        "completed": [
            {
                "name": s.name,
                "kind": s.kind,
                "ok": s.ok,
                "result": _seal(own, s.result),
                "errorName": s.error_name,
                "errorMessage": _seal(own, s.error_message),
            }
            for s in inst.completed.values()
        ],
        "pendingNames": list(inst.pending),
        "pendingKinds": list(inst.pending.values()),
        "configNames": list(inst.configs),
        "configs": list(inst.configs.values()),
        "attemptNames": list(inst.attempts),
        "attempts": list(inst.attempts.values()),
        "timer": None
        if inst.timer is None
        else {
            "kind": inst.timer.kind,
            "name": inst.timer.name,
            "due": inst.timer.due,
            "eventType": inst.timer.event_type,
            "attempt": inst.timer.attempt,
        },
        "events": [
            {
                "sequence": e.sequence,
                "type": e.type,
                "payload": _seal(ring.key_for(inst.workflow_uid, inst.instance_id, e.sequence), e.payload),
                "size": e.size,
            }
            for e in inst.events
        ],
        "eventsBytes": inst.events_bytes,
        "nextSequence": inst.next_sequence,
        "terminalAt": inst.terminal_at,
    }


def instance_of(f: Mapping[str, Any], ring: sealing.KeyRing) -> Instance:
    """An InstanceFold record as the fold holds it: documents opened with the keys alive, a
    terminal instance settled (`_state.settled`), names shared."""
    reason = f["errorReason"]
    return settled(
        Instance(
            sys.intern(f["workflowUid"]),
            f["instanceId"],
            sys.intern(f["space"]),
            ring.open(f["params"]),
            f["createdAt"],
            sys.intern(f["status"]),
            ring.open(f["output"]),
            (sys.intern(reason), ring.open(f["errorMessage"])) if reason is not None else None,
            f["owner"],
            f["contexts"],
            None if f["versionUid"] is None else sys.intern(f["versionUid"]),
            completed={
                s["name"]: Step(
                    s["name"], s["kind"], s["ok"], ring.open(s["result"]), s["errorName"], ring.open(s["errorMessage"])
                )
                for s in f["completed"]
            },
            pending=dict(zip(f["pendingNames"], f["pendingKinds"], strict=True)),
            configs=dict(zip(f["configNames"], f["configs"], strict=True)),
            attempts=dict(zip(f["attemptNames"], f["attempts"], strict=True)),
            timer=None
            if f["timer"] is None
            else Timer(
                f["timer"]["kind"],
                f["timer"]["name"],
                f["timer"]["due"],
                f["timer"]["eventType"],
                f["timer"]["attempt"],
            ),
            events=[Event(e["sequence"], e["type"], ring.open(e["payload"]), e["size"]) for e in f["events"]],
            events_bytes=f["eventsBytes"],
            next_sequence=f["nextSequence"],
            terminal_at=f["terminalAt"],
        )
    )


def _size(inst: Instance) -> int:
    docs = [inst.params, inst.output, *(s.result for s in inst.completed.values()), *(e.payload for e in inst.events)]
    # Sealing grows a document by a third (base64) plus its key ID and nonce.
    return _PER_INSTANCE + 64 * len(inst.completed) + sum(len(d) * 4 // 3 + 64 for d in docs if d is not None)


def capture(
    instances: Mapping[str, Instance],
    mine: Callable[[str], bool],
    ring: sealing.KeyRing,
    decided: Sequence[str],
    snapshot_id: str,
    limit: int = CHUNK_BYTES,
) -> tuple[list[WorkflowSnapshotChunk], int]:
    """The chunks of the instances `mine` picks (by key) and the decided IDs; how many instances."""
    chunks: list[WorkflowSnapshotChunk] = []
    batch: list[dict[str, Any]] = []
    size = 0
    for key, inst in instances.items():
        if not mine(key):
            continue
        n = _size(inst)
        if batch and size + n > limit:
            chunks.append(WorkflowSnapshotChunk(snapshot_id, len(chunks), batch, []))
            batch, size = [], 0
        batch.append(fold_of(key, inst, ring))
        size += n
    ids, taken = list(decided), 0
    while True:  # the decided IDs ride in the last chunks, as many as fit
        room = max(0, (limit - size) // 40) if batch or not chunks else limit // 40
        part = ids[taken : taken + max(room, 1)] if taken < len(ids) else []
        chunks.append(WorkflowSnapshotChunk(snapshot_id, len(chunks), batch, part))
        taken += len(part)
        batch, size = [], 0
        if taken >= len(ids):
            break
    return chunks, sum(len(c.instances) for c in chunks)


def restore(chunks: Sequence[WorkflowSnapshotChunk], ring: sealing.KeyRing) -> tuple[dict[str, Instance], list[str]]:
    """The instances (by key) and the decided command IDs (oldest first) of a snapshot."""
    instances: dict[str, Instance] = {}
    decided: list[str] = []
    for chunk in sorted(chunks, key=lambda c: c.index):
        for f in chunk.instances:
            instances[f["key"]] = instance_of(f, ring)
        decided += chunk.decided
    return instances, decided
