"""The integer ranges requirements.md gives spec fields, written once: the unit tests (through the
decisions) and the conformance tests (over HTTP) then hold the Host to the same edges."""

# (field, lowest, highest) of a QueueConsumer spec; each is updatable.
CONSUMER_RANGES = [
    ("maxBatchSize", 1, 100),  # QC-4
    ("maxBatchTimeoutSeconds", 0, 60),  # QC-5
    ("maxConcurrency", 1, 250),  # QC-6
    ("maxRetries", 0, 100),  # QC-7
    ("retryDelaySeconds", 0, 43200),  # QC-8
]
