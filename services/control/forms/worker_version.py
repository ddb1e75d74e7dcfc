"""WorkerVersion (placeholder until its issue lands: accepts no spec)."""

from typing import Any

from sumi.control.forms._base import BaseForm
from sumi.control.forms.names import WORKER_VERSION
from sumi.core.problems import FieldError


class WorkerVersion(BaseForm):
    url = WORKER_VERSION

    def validate_spec(self, spec: Any) -> list[FieldError]:
        return [FieldError("/spec", "this Form is not available on this Host yet")]
