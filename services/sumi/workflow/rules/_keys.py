"""Which data keys a workflow record needs, which it destroys, and which of its fields are sealed
(pure; the engine applies it on the way to the log, the fold reads records opened).

- An instance key seals the instance's params, step results, error messages and output; it is
  made with the first record that needs it (InstanceCreated, or the first record of an instance
  created before sealing existed) and destroyed by the instance's purge (WF-13, WF-47).
- Each event's payload has a key of its own, so a terminal transition can destroy the payloads
  of the events still unmatched (WF-25) while a matched one, whose payload a wait's result also
  holds, stays readable as long as the instance's history (until its purge).
- A Workflow's `InstancesPurged` (one in each partition whose instances its delete purged)
  destroys whatever key is left of the Workflow's instances in that partition: the keys of
  another partition's instances are its owner's to destroy, with their purge.

Decisions stay plain: the engine seals a record for the log after deciding and folding it
(`sealing.seal_record`), and opens what it reads back at a rebuild, so the fold never sees
ciphertext.
"""

import dataclasses
from collections.abc import Callable

from sumi.core import records as r
from sumi.core import sealing
from sumi.workflow.rules._state import TERMINAL, Instance


@dataclasses.dataclass(frozen=True)
class Changes:
    made: list[r.DataKey]  # written before the record, in its transaction
    dropped: list[str]  # tombstoned after it, in the same transaction


def changes(
    inst: Instance | None,
    rec: r.WorkflowRecord,
    ring: sealing.KeyRing,
    now: int,
    new_id: Callable[[], str],
    beside: Callable[[str], bool] | None = None,
) -> Changes:
    """What `rec` does to the keys; `inst` is the instance before `rec` is folded. `beside`
    says whether an instance ID of the record's Workflow is in the record's partition (None:
    the log has one)."""
    if isinstance(rec, r.InstancesPurged):
        return Changes([], ring.keys_of_workflow(rec.workflowUid, beside))
    if isinstance(rec, r.InstancePurged):
        return Changes([], ring.keys_of(rec.workflowUid, rec.instanceId))
    made = []
    wf, iid, sequence = sealing.owner(rec) if type(rec) in sealing.SEALED else (None, None, None)
    needs = isinstance(rec, r.InstanceCreated) or bool(sealing.documents(rec))
    if wf is not None and iid is not None and needs and ring.key_for(wf, iid, sequence) is None:
        made.append(sealing.new_key(new_id(), wf, iid, now, sequence))
    dropped: list[str] = []
    if isinstance(rec, r.InstanceStatusChanged) and rec.status in TERMINAL and inst is not None and not inst.terminal:
        keys = (ring.key_for(rec.workflowUid, rec.instanceId, e.sequence) for e in inst.events)
        dropped = [k.keyId for k in keys if k is not None]  # WF-25: the unmatched events' payloads
    return Changes(made, dropped)
