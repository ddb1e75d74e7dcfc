"""Worker runtimes: run a Version's code in stoppable, isolated execution contexts.

``javascript`` contexts are worker threads of one sandboxed Node.js process;
``python`` contexts are child processes. Both kinds of process run behind the
OS walls of ``_walls`` (docs/security.md).
"""

from ._jshost import JsContext, JsRuntime, RuntimeUnavailable
from ._pyhost import PyContext, PyRuntime
from .types import (
    EnvSpec,
    ExecutionContext,
    HostCall,
    HostError,
    InvokeResult,
    Limits,
    LoadInfo,
    LogSink,
    Module,
    QueueBatch,
    QueueMessage,
    Runtime,
    StepRecord,
    WorkflowInvocation,
    WorkflowOutcome,
)

__all__ = [
    "EnvSpec",
    "ExecutionContext",
    "HostCall",
    "HostError",
    "InvokeResult",
    "JsContext",
    "JsRuntime",
    "Limits",
    "LoadInfo",
    "LogSink",
    "Module",
    "PyContext",
    "PyRuntime",
    "QueueBatch",
    "QueueMessage",
    "Runtime",
    "RuntimeUnavailable",
    "StepRecord",
    "WorkflowInvocation",
    "WorkflowOutcome",
]
