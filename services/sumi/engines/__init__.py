"""What the queue engine and the workflow engine share, one floor below both.

Neither engine package imports the other (tests/unit/test_engine_imports.py): a piece
both need lives here (or in `sumi.core`), and the one place that puts them together,
the queue service with the workflow client its handlers' bindings use, sits above
both (`sumi.host.queue_service`).
"""
