"""AtLeastOnceQueue 0.2.0 (forms.md): a queue whose messages are its data."""

from sumi.control.rules.forms._base import (
    BaseForm,
    Registry,
    ResourceView,
    closed_object,
    form_url,
    integer_in,
    referencing,
)
from sumi.core.problems import FieldError, Problem

URL = form_url("AtLeastOnceQueue", "0.2.0")


class AtLeastOnceQueue(BaseForm):
    url = URL

    def validate_spec(self, spec: object) -> list[FieldError]:
        spec, errors = closed_object(spec, "/spec", ["retentionSeconds"])
        if "retentionSeconds" in spec:
            errors += integer_in(spec["retentionSeconds"], "/spec/retentionSeconds", 60, 1_209_600)
        return errors

    def check_delete(self, registry: Registry, resource: ResourceView) -> Problem | None:
        # QC-51: refused while any QueueConsumer references it as queue or deadLetterQueue.
        from sumi.control.rules.forms.names import QUEUE_CONSUMER

        users = referencing(registry, resource.uid, [QUEUE_CONSUMER])
        if users:
            return Problem("dependency_conflict", f"queue {resource.uid} is referenced by QueueConsumer {users[0].uid}")
        return None
