"""The workflow engine's snapshots (issue 17, item 3): the instance table of a log prefix,
captured, restored and followed by the rest of the log, equals the fold of the whole log; its
documents are sealed, so a purge's destroyed key leaves them unreadable. Pure: no broker."""

import random

import pytest

from sumi.core import records as r
from sumi.core import sealing
from sumi.wire import codec
from sumi.workflow.rules._snapshot import capture, restore
from sumi.workflow.rules._state import Counts, Instance, evolve

T0 = 1_700_000_000_000


def ring_for(keys: list[str]) -> sealing.KeyRing:
    ring = sealing.KeyRing()
    for key in keys:
        wf, iid = key.split("/")
        ring.add(sealing.new_key(f"dk_{iid}", wf, iid, T0))
        for seq in range(1, 8):
            ring.add(sealing.new_key(f"dk_{iid}_{seq}", wf, iid, T0, seq))
    return ring


def random_log(seed: int, n: int = 6, steps: int = 200) -> list[tuple[str, r.Record]]:
    """Instance logs interleaved: creates, contexts, steps (ok, failed, pending), sleeps,
    waits, retries, events, terminal statuses and a purge; documents of every kind."""
    rnd = random.Random(seed)
    keys = [f"wf_{i % 2}/inst-{i}" for i in range(n)]
    log: list[tuple[str, r.Record]] = []
    seqs = dict.fromkeys(keys, 0)
    for key in keys:
        wf, iid = key.split("/")
        log.append((key, r.InstanceCreated(wf, iid, "demo", T0, rnd.choice([None, '{"p":1}']))))
    for i in range(steps):
        key = rnd.choice(keys)
        wf, iid = key.split("/")
        at, name = T0 + i, f"s{rnd.randint(0, 5)}"
        roll = rnd.random()
        if roll < 0.15:
            log.append((key, r.InstanceContextStarted(wf, iid, f"tok{i}", "v1", i, at)))
        elif roll < 0.45:
            ok = rnd.random() < 0.8
            log.append(
                (
                    key,
                    r.StepAttemptCommitted(
                        wf,
                        iid,
                        name,
                        "do",
                        rnd.randint(1, 3),
                        ok,
                        rnd.random() < 0.7,
                        at,
                        result=f'{{"r":{i}}}' if ok else None,
                        errorName=None if ok else "Error",
                        errorMessage=None if ok else f"boom {i}",
                        config=rnd.choice([None, '{"retries":{"limit":2}}']),
                    ),
                )
            )
        elif roll < 0.55:
            log.append((key, r.SleepScheduled(wf, iid, name, at + 5000, "tok", at)))
        elif roll < 0.62:
            log.append((key, r.WaitScheduled(wf, iid, name, "go", at + 9000, "tok", at)))
        elif roll < 0.7:
            log.append((key, r.RetryScheduled(wf, iid, name, 2, at + 100, "tok", at)))
        elif roll < 0.85:
            seqs[key] += 1
            log.append((key, r.EventAccepted(wf, iid, seqs[key], rnd.choice(["go", "stop"]), 12, at, '{"e":1}')))
        elif roll < 0.95:
            status = rnd.choice(["running", "paused", "complete", "errored"])
            output = '{"o":1}' if status == "complete" else None
            reason, message = ("step_failed", "Error: no") if status == "errored" else (None, None)
            log.append((key, r.InstanceStatusChanged(wf, iid, status, at, output, reason, message)))
        elif i > steps // 2:
            log.append((key, r.InstancePurged(wf, iid, at)))
    return log


def fold(log: list[tuple[str, r.Record]], table: dict[str, Instance] | None = None) -> dict[str, Instance]:
    table = {} if table is None else table
    for key, rec in log:
        inst = evolve(table.get(key), rec)  # type: ignore[arg-type]
        if inst is None or inst.purged:
            table.pop(key, None)
        else:
            table[key] = inst
    return table


@pytest.mark.parametrize("seed", range(10))
def test_a_snapshot_and_the_tail_equal_the_whole_fold(seed: int) -> None:
    # WF-21, WF-35, WF-36, WF-37, WF-43, WF-46: a start from a snapshot decides as one from offset 0
    log = random_log(seed)
    ring = ring_for(sorted({key for key, _ in log}))
    whole = fold(log)
    for cut in sorted({0, 7, len(log) // 3, len(log) // 2, len(log)}):
        prefix = fold(log[:cut])
        chunks, entries = capture(prefix, lambda key: True, ring, ["cmd_1", "cmd_2"], "snap_w", limit=900)
        assert entries == len(prefix) and [c.index for c in chunks] == list(range(len(chunks)))
        decoded = [codec.decode(codec.encode(c)) for c in chunks]  # as the topic gives them back
        restored, decided = restore(decoded, ring)  # type: ignore[arg-type]
        assert decided == ["cmd_1", "cmd_2"]
        assert fold(log[cut:], restored) == whole, f"cut at {cut}"


def test_documents_are_sealed_and_a_destroyed_key_leaves_them_unreadable() -> None:
    # WF-13, WF-25, WF-47: crypto-shredding holds for a snapshot as for the instance log
    log = [
        ("wf/i", r.InstanceCreated("wf", "i", "demo", T0, '{"secret":"params"}')),
        ("wf/i", r.StepAttemptCommitted("wf", "i", "s", "do", 1, True, True, T0, '{"secret":"result"}')),
        ("wf/i", r.EventAccepted("wf", "i", 1, "go", 20, T0, '{"secret":"payload"}')),
    ]
    ring = ring_for(["wf/i"])
    chunks, _ = capture(fold(log), lambda key: True, ring, [], "snap_s")
    raw = b"".join(codec.encode(c) for c in chunks)
    assert b"secret" not in raw and b"sealed1:" in raw
    assert restore(chunks, ring)[0] == fold(log)
    for key_id in ring.keys_of("wf", "i"):
        ring.drop(key_id)  # the purge's tombstones
    inst = restore(chunks, ring)[0]["wf/i"]
    assert inst.params is None and inst.completed["s"].result is None and inst.events[0].payload is None


def test_an_instance_without_a_key_keeps_its_documents_as_the_log_does() -> None:
    # DOC-5: a document the log holds unsealed (written before sealing) comes back as it was
    log = [("wf/old", r.InstanceCreated("wf", "old", "demo", T0, '{"p":2}'))]
    chunks, _ = capture(fold(log), lambda key: True, sealing.KeyRing(), [], "snap_o")
    assert restore(chunks, sealing.KeyRing())[0]["wf/old"].params == '{"p":2}'


def test_the_counts_of_a_restored_table_are_the_folds() -> None:
    # WF-9: instance counts per status come back with the instances
    log = random_log(3)
    folded = Counts()
    table: dict[str, Instance] = {}
    for key, rec in log:
        inst = folded.fold(table.get(key), rec)  # type: ignore[arg-type]
        if inst is None or inst.purged:
            table.pop(key, None)
        else:
            table[key] = inst
    restored = Counts()
    for inst in table.values():
        restored.add(inst)
    assert restored.per == folded.per


def test_many_decided_ids_ride_in_chunks_of_their_own() -> None:
    ids = [f"cmd_{i:05d}" for i in range(3000)]
    chunks, entries = capture({}, lambda key: True, sealing.KeyRing(), ids, "snap_d", limit=4000)
    assert entries == 0 and len(chunks) > 1
    assert restore(chunks, sealing.KeyRing())[1] == ids
