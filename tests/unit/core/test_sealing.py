"""Sealed documents and the key ring (crypto-shredding, WF-13, WF-25, WF-47): a document opens
with its key while the key lives, and with nothing once the key's tombstone is folded."""

import dataclasses

from sumi.core import records as r
from sumi.core import sealing
from sumi.wire import codec

KEY = sealing.new_key("dk_01", "wf_1", "inst-1", 1)
OTHER = sealing.new_key("dk_02", "wf_1", "inst-1", 1, sequence=1)


def ring(*keys: r.DataKey) -> sealing.KeyRing:
    out = sealing.KeyRing()
    for key in keys:
        out.add(key)
    return out


def test_a_sealed_document_names_its_key_and_hides_its_text() -> None:  # WF-13
    sealed = sealing.seal(KEY, '{"secret":"marker-1"}')
    assert sealing.is_sealed(sealed) and sealing.key_id_of(sealed) == "dk_01"
    assert "marker-1" not in sealed
    assert sealing.unseal(KEY, sealed) == '{"secret":"marker-1"}'
    assert sealing.seal(KEY, "x") != sealing.seal(KEY, "x")  # a fresh nonce per seal


def test_only_its_own_key_opens_it() -> None:  # WF-13: no key but the named one reads it
    sealed = sealing.seal(KEY, '"a"')
    assert sealing.unseal(OTHER, sealed) is None
    renamed = sealed.replace("dk_01", "dk_02")  # moved under another key's name: refused
    assert sealing.unseal(OTHER, renamed) is None and sealing.unseal(KEY, renamed) is None
    assert sealing.unseal(KEY, sealed[:-4] + "AAAA") is None  # tampered


def test_a_tombstone_makes_the_document_unreadable() -> None:  # WF-25, WF-47
    keys = ring(KEY, OTHER)
    sealed = sealing.seal(OTHER, '{"m":"payload"}')
    assert keys.open(sealed) == '{"m":"payload"}'
    keys.fold("dk_02", None)
    assert keys.open(sealed) is None
    assert keys.key_for("wf_1", "inst-1", 1) is None and keys.key_for("wf_1", "inst-1") == KEY
    assert keys.keys_of("wf_1", "inst-1") == ["dk_01"]


def test_plain_documents_of_older_records_read_as_they_are() -> None:  # DOC-5: old records stay readable
    assert sealing.KeyRing().open('{"n":1}') == '{"n":1}'
    assert sealing.KeyRing().open(None) is None


def test_records_are_sealed_field_by_field_and_opened_back() -> None:  # WF-13 (params, results, outputs, errors)
    keys = ring(KEY, OTHER)
    plain = [
        r.InstanceCreated("wf_1", "inst-1", "demo", 1, '{"p":"params"}'),
        r.StepAttemptCommitted("wf_1", "inst-1", "s", "do", 1, False, True, 2, '{"r":1}', "step_failed", "Error: x"),
        r.EventAccepted("wf_1", "inst-1", 1, "go", 10, 3, '{"e":"payload"}'),
        r.InstanceStatusChanged("wf_1", "inst-1", "errored", 4, None, "run_threw", "boom"),
    ]
    for rec in plain:
        sealed = sealing.seal_record(rec, keys)
        docs = sealing.documents(rec)
        assert docs and all(sealing.is_sealed(v) for v in sealing.documents(sealed).values())
        assert codec.decode(codec.encode(sealed)) == sealed  # the same Avro schema carries it
        assert sealing.open_record(sealed, keys) == rec
    event = sealing.seal_record(plain[2], keys)
    assert sealing.key_id_of(event.payload) == "dk_02"  # an event's payload has a key of its own
    assert sealing.missing(event, ring(KEY)) == {"dk_02"}
    assert sealing.open_record(event, ring(KEY)) == dataclasses.replace(plain[2], payload=None)


def test_the_key_is_never_in_its_repr() -> None:  # docs/security.md: keys are Host secrets
    assert KEY.key.hex() not in repr(KEY) and repr(KEY.key) not in repr(KEY)


def test_the_key_ring_holds_one_key_id_per_instance_and_a_set_only_with_event_keys() -> None:
    # WF-13, WF-25, WF-47: the ring's indexes answer as before, held compactly
    ring = sealing.KeyRing()
    own = sealing.new_key("dk_i", "wf_1", "i1", 1)
    ev1, ev2 = (sealing.new_key(f"dk_e{s}", "wf_1", "i1", 1, s) for s in (1, 2))
    ring.add(own)
    assert ring.of_instance[("wf_1", "i1")] == "dk_i" and ring.key_for("wf_1", "i1") == own
    ring.add(ev1)
    ring.add(ev2)
    assert ring.keys_of("wf_1", "i1") == ["dk_e1", "dk_e2", "dk_i"] and ring.key_for("wf_1", "i1", 2) == ev2
    ring.drop("dk_e1")
    ring.drop("dk_e2")
    assert ring.of_instance[("wf_1", "i1")] == "dk_i" and ring.key_for("wf_1", "i1", 1) is None
    assert ring.keys_of_workflow("wf_1") == ["dk_i"]
    ring.drop("dk_i")
    assert ring.keys_of("wf_1", "i1") == [] and ring.of_instance == {} and ring.named == {} and ring.keys == {}
