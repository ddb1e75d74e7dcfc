"""QueueConsumer (placeholder until its issue lands: accepts no spec)."""

from typing import Any

from sumi.control.forms._base import BaseForm
from sumi.control.forms.names import QUEUE_CONSUMER
from sumi.core.problems import FieldError


class QueueConsumer(BaseForm):
    url = QUEUE_CONSUMER

    def validate_spec(self, spec: Any) -> list[FieldError]:
        return [FieldError("/spec", "this Form is not available on this Host yet")]
