"""DurableWorkflow (placeholder until its issue lands: accepts no spec)."""

from sumi.control.forms._base import BaseForm
from sumi.control.forms.names import DURABLE_WORKFLOW
from sumi.core.problems import FieldError


class DurableWorkflow(BaseForm):
    url = DURABLE_WORKFLOW

    def validate_spec(self, spec: object) -> list[FieldError]:
        return [FieldError("/spec", "this Form is not available on this Host yet")]
