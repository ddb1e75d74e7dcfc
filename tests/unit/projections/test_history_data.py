"""A history row's data (WF-21, WF-34, host-api.md section 5): the record's fields as canonical
JSON, its documents as JSON. The projection puts each document in as the log holds it (the
engine wrote it canonical) rather than parsing and encoding it again: the same text."""

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sumi.core import records as r
from sumi.core.canonical import loads, parsed_canonical
from sumi.core.times import rfc3339
from sumi.wire import codec
from sumi_projections import workflow

W, T0 = "res_wf", 1_700_000_000_000

text = st.text(max_size=12)
# Text that reads like the placeholder and member names the encoder looks for.
tricky = st.sampled_from(['"result":0', '"config":0', "result", ',"payload":0}', "\\u0000", "\x00", "é\u2028"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
    | tricky
)
documents = st.recursive(
    scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text | tricky, kids, max_size=3)
)
doc = st.none() | documents.map(parsed_canonical)


def reference(rec: Any) -> str:
    """The definition: every shown field, documents parsed, the whole encoded once."""
    data: dict[str, Any] = {}
    for name in codec.field_names(type(rec)):
        value = getattr(rec, name)
        if name in workflow.HIDDEN or value is None:
            continue
        if name in workflow.DOCUMENTS:
            value = loads(value)
        elif name in workflow.TIMES:
            value = rfc3339(value)
        data[name] = value
    return parsed_canonical(data)


@given(result=doc, config=doc, message=st.none() | text | tricky, sequence=st.none() | st.integers(0, 2**40))
def test_a_step_row_is_its_fields_with_the_documents_as_written(
    result: str | None, config: str | None, message: str | None, sequence: int | None
) -> None:  # WF-21, WF-34
    rec = r.StepAttemptCommitted(
        W, "a", "load", "do", 2, False, True, T0, result, "step_failed", message, config, sequence, "tok"
    )
    assert workflow._data(rec) == reference(rec)


@given(params=doc, payload=doc, output=doc, kind=text | tricky)
def test_every_document_field_alike(params: str | None, payload: str | None, output: str | None, kind: str) -> None:
    for rec in (
        r.InstanceCreated(W, "a", "demo", T0, params, "alice"),
        r.EventAccepted(W, "a", 3, kind, 10, T0, payload),
        r.InstanceStatusChanged(W, "a", "complete", T0, output, None, None),
        r.WaitScheduled(W, "a", kind, kind, T0 + 5, "tok", T0),
        r.RetryScheduled(W, "a", kind, 2, T0 + 9, "tok", T0),
    ):
        assert workflow._data(rec) == reference(rec)
