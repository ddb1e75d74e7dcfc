"""The OpenAPI 3.1 document of the Host API (host-api.md), written by hand.

Kept in step with the served routes by tests/unit/gateway/test_openapi.py.
"""

import re
from typing import Any

from sumi.core.problems import STATUS

JSON = "application/json"
PROBLEM = "application/problem+json"
NAME = {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"}
TIME = {"type": "string", "format": "date-time"}
INSTANCE_ID = {"type": "string", "minLength": 1, "maxLength": 256, "description": "1..256 Unicode scalar values"}
INSTANCE_STATUS = {"enum": ["queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"]}
BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"  # standard, padded
DOC_SCHEMA = {
    "type": "object",
    "description": "a document (DOC-1..6): at most 1024 root properties, 1 MiB canonical (RFC 8785), objects "
    "and arrays nested at most 128 deep (the root counted; deeper is invalid_params); numbers are IEEE doubles "
    "(an integer beyond 2**53 is read as the nearest double, one beyond the doubles is invalid_params)",
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A closed object: the API rejects unknown keys, so the schema says so too."""
    return {"type": "object", "properties": props, "required": required or [], "additionalProperties": False}


SCHEMAS: dict[str, Any] = {
    "Problem": {
        "type": "object",
        "required": ["type", "title", "status", "code", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "code": {"type": "string", "enum": sorted(STATUS)},
            "detail": {"type": "string"},
            "instance": {"type": "string"},
            "errors": {
                "type": "array",
                "items": obj({"path": {"type": "string"}, "message": {"type": "string"}}, ["path", "message"]),
            },
        },
    },
    "Space": obj(
        {"name": NAME, "role": {"enum": ["viewer", "editor", "admin"]}, "createdAt": TIME}, ["name", "createdAt"]
    ),
    "SpaceCreate": obj({"name": NAME}, ["name"]),
    "Grant": obj({"space": NAME, "role": {"enum": ["viewer", "editor"]}}, ["space", "role"]),
    "TokenCreate": obj(
        {
            "principal": NAME,
            "grants": {"type": "array", "items": ref("Grant")},
            "admin": {"type": "boolean", "default": False},
        },
        ["principal"],
    ),
    "TokenCreated": obj({"token": {"type": "string"}, "principal": NAME}, ["token", "principal"]),
    "Principal": obj(
        {
            "principal": NAME,
            "admin": {"type": "boolean"},
            "tokens": {"type": "integer", "minimum": 1},
            "lastIssuedAt": TIME,
            "grants": {"type": "array", "items": ref("Grant")},
        },
        ["principal", "admin", "tokens", "lastIssuedAt", "grants"],
    ),
    "PrincipalList": obj({"items": {"type": "array", "items": ref("Principal")}}, ["items"]),
    "Resource": obj(
        {
            "uid": {"type": "string"},
            "space": NAME,
            "name": NAME,
            "form": {"type": "string"},
            "generation": {"type": "integer", "minimum": 1},
            "state": {"enum": ["creating", "active", "updating", "deleting"]},
            "spec": {"type": "object"},
            "observed": {"type": "object"},
            "output": {"type": "object"},
            "createdAt": TIME,
            "updatedAt": TIME,
        },
        ["uid", "space", "name", "form", "generation", "state", "spec", "observed", "output", "createdAt", "updatedAt"],
    ),
    "ResourceCreate": obj(
        {
            "name": NAME,
            "form": {"type": "string", "format": "uri"},
            "spec": {"type": "object"},
            "privateInputs": {"type": "object"},
        },
        ["name", "form", "spec"],
    ),
    "ResourceUpdate": obj({"spec": {"type": "object"}, "privateInputs": {"type": "object"}}, ["spec"]),
    "ResourcePage": obj(
        {"items": {"type": "array", "items": ref("Resource")}, "nextCursor": {"type": ["string", "null"]}},
        ["items", "nextCursor"],
    ),
    "Operation": obj(
        {
            "id": {"type": "string"},
            "kind": {"enum": ["create", "update", "delete"]},
            "space": NAME,
            "resourceUid": {"type": "string"},
            "generation": {"type": "integer"},
            "state": {"enum": ["pending", "running", "succeeded", "failed", "reconciling"]},
            "effect": {"enum": ["none", "partial", "complete", "unknown"]},
            "error": ref("Problem"),
            "createdAt": TIME,
            "updatedAt": TIME,
        },
        ["id", "kind", "space", "resourceUid", "generation", "state", "effect", "createdAt", "updatedAt"],
    ),
    "MessageSend": obj(
        {
            "messages": {
                "type": "array",
                "minItems": 1,
                "maxItems": 100,
                "items": obj(
                    {
                        "body": {"type": "string", "contentEncoding": "base64", "pattern": BASE64},
                        "delaySeconds": {"type": "integer", "minimum": 0, "maximum": 43200},
                    },
                    ["body"],
                ),
            }
        },
        ["messages"],
    ),
    "MessageIds": obj({"messageIds": {"type": "array", "items": {"type": "string"}}}, ["messageIds"]),
    "QueueStats": obj(
        {
            **{
                k: {"type": "integer", "minimum": 0}
                for k in ("ready", "delayed", "inFlight", "acknowledged", "retried", "deadLettered", "discarded")
            },
            "observedAt": TIME,
        },
        ["ready", "delayed", "inFlight", "acknowledged", "retried", "deadLettered", "discarded", "observedAt"],
    ),
    "PeekItem": obj(
        {
            "id": {"type": "string"},
            "timestamp": {"type": "integer"},
            "attempts": {"type": "integer"},
            "state": {"enum": ["ready", "delayed", "inFlight"]},
            "size": {"type": "integer"},
            "body": {"type": "string", "contentEncoding": "base64"},
        },
        ["id", "timestamp", "attempts", "state", "size"],
    ),
    "Peek": obj({"items": {"type": "array", "items": ref("PeekItem")}}, ["items"]),
    "SpaceList": obj({"items": {"type": "array", "items": ref("Space")}}, ["items"]),
    "InstanceCreate": obj({"id": INSTANCE_ID, "params": DOC_SCHEMA}),
    "InstanceStatus": obj({"id": {"type": "string"}, "status": INSTANCE_STATUS}, ["id", "status"]),
    "Instance": obj(
        {
            "id": {"type": "string"},
            "status": INSTANCE_STATUS,
            "output": DOC_SCHEMA,
            "error": obj(
                {
                    "reason": {
                        "enum": [
                            "run_threw",
                            "step_failed",
                            "step_limit_exceeded",
                            "lifetime_exceeded",
                            "step_definition_mismatch",
                        ]
                    },
                    "message": {"type": "string"},
                },
                ["reason"],
            ),
        },
        ["id", "status"],
    ),
    "InstanceSummary": obj(
        {"id": {"type": "string"}, "status": INSTANCE_STATUS, "createdAt": TIME, "updatedAt": TIME},
        ["id", "status", "createdAt", "updatedAt"],
    ),
    "InstancePage": obj(
        {"items": {"type": "array", "items": ref("InstanceSummary")}, "nextCursor": {"type": ["string", "null"]}},
        ["items", "nextCursor"],
    ),
    "EventSend": obj({"type": INSTANCE_ID, "payload": DOC_SCHEMA}, ["type"]),
    "EventSequence": obj({"sequence": {"type": "integer", "minimum": 1}}, ["sequence"]),
    "History": obj(
        {
            "items": {
                "type": "array",
                "items": obj(
                    {
                        "seq": {"type": "integer", "minimum": 1},
                        "type": {"type": "string"},
                        "at": TIME,
                        "data": {"type": "object"},
                    },
                    ["seq", "type", "at", "data"],
                ),
            }
        },
        ["items"],
    ),
    "Status": {"type": "object", "properties": {"status": {"type": "string"}}},
    "LogLine": obj(
        {
            "at": TIME,
            "level": {"enum": ["debug", "info", "warn", "error"]},
            "text": {"type": "string"},
            "worker": {"type": "string"},
            "version": {"type": "string"},
            "resource": {"type": "string", "description": "the QueueConsumer or DurableWorkflow that invoked it"},
            "batchId": {"type": "string"},
            "instanceId": {"type": "string"},
            "step": {"type": "string"},
            "dropped": {"type": "integer", "minimum": 1, "description": "this line says that many were dropped"},
        },
        ["at", "level", "text", "worker", "version", "resource"],
    ),
    "LogPage": obj({"items": {"type": "array", "items": ref("LogLine")}}, ["items"]),
}


# Every 429 and 503 says when to come back (sumi.gateway._admission).
RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "required": True, "description": "seconds"}}


def problems(*codes: str) -> dict[str, Any]:
    by_status: dict[str, list[str]] = {}
    for code in codes:
        by_status.setdefault(str(STATUS[code]), []).append(code)
    return {
        status: {
            "description": " | ".join(cs),
            "content": {PROBLEM: {"schema": ref("Problem")}},
            **({"headers": RETRY_AFTER} if status in ("429", "503") else {}),
        }
        for status, cs in by_status.items()
    }


def answer(status: int, schema: str | None, description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"description": description}
    if schema:
        body["content"] = {JSON: {"schema": ref(schema)}}
    if headers:
        body["headers"] = headers
    return {str(status): body}


def param(
    name: str, where: str, schema: dict[str, Any], required: bool = False, description: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": required or where == "path",
        "schema": schema,
        "description": description,
    }


def operation(
    summary: str,
    responses: dict[str, Any],
    *errors: str,
    params: list[dict[str, Any]] | None = None,
    body: str | None = None,
    public: bool = False,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": params or [],
        # Any API request may be turned away while the gateway is full (sumi.gateway._admission).
        "responses": {
            **responses,
            **problems(*dict.fromkeys([*errors, *(() if public else ("unauthenticated", "backend_unavailable"))])),
        },
    }
    if body:
        op["requestBody"] = {"required": True, "content": {JSON: {"schema": ref(body)}}}
    if public:
        op["security"] = []
    return op


SPACE = param("space", "path", NAME)
UID = param("uid", "path", {"type": "string"}, description="Resource UID or name")
KEY_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}
IDEMPOTENCY = param("Idempotency-Key", "header", KEY_SCHEMA, True, "scoped to (principal, Space)")
IDEMPOTENCY_OPTIONAL = param(
    "Idempotency-Key", "header", KEY_SCHEMA, description="a replay appends nothing and returns the same IDs"
)
LOCATION = {"Location": {"schema": {"type": "string"}, "description": "/v2/operations/{id}"}}
WRITE_ERRORS = (
    "invalid_request",
    "invalid_spec",
    "unsupported_form",
    "forbidden",
    "not_found",
    "name_conflict",
    "dependency_conflict",
    "resource_busy",
    "payload_too_large",
    "idempotency_key_reused",
    "idempotency_key_required",
    "backend_unavailable",
)
ACCEPTED = answer(202, "Operation", "accepted; the Operation reports the outcome", LOCATION)
QUEUE_ERRORS = ("invalid_request", "not_found", "backend_unavailable")
INSTANCES = "/v2/spaces/{space}/workflows/{uid}/instances"
WORKFLOW = param("uid", "path", {"type": "string"}, description="DurableWorkflow UID or name")
INSTANCE = param("id", "path", INSTANCE_ID, description="percent-encoded; any Unicode scalar values")
IDEMPOTENCY_INSTANCE = param(
    "Idempotency-Key", "header", KEY_SCHEMA, description="a replay returns the first answer and appends nothing"
)
# A workflow command's answer says where its decision lies; a read sent with it waits for the read side.
POSITION_SCHEMA = {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}
POSITION = {
    "Sumi-Position": {
        "schema": POSITION_SCHEMA,
        "description": "<partition>-<offset> of the decision on the instance log; send it back on a read "
        "(any gateway) to see this write",
    }
}
READ_AFTER = param(
    "Sumi-Position",
    "header",
    POSITION_SCHEMA,
    description="a write's answer's position: the read waits (at most 2 s, then 503) until the read side has it",
)
INSTANCE_ERRORS = (
    "invalid_request",
    "forbidden",
    "not_found",
    "payload_too_large",
    "idempotency_key_reused",
    "backend_unavailable",
)

PATHS: dict[str, dict[str, Any]] = {
    "/v2/spaces": {
        "post": operation(
            "Create a Space (admin)",
            answer(201, "Space", "created"),
            "invalid_request",
            "forbidden",
            "name_conflict",
            "backend_unavailable",
            body="SpaceCreate",
        ),
        "get": operation(
            "List the Spaces the caller has a role in",
            answer(200, "SpaceList", "the caller's Spaces"),
            "backend_unavailable",
        ),
    },
    "/v2/spaces/{space}": {
        "delete": operation(
            "Delete an empty Space (admin)",
            answer(204, None, "deleted"),
            "forbidden",
            "not_found",
            "dependency_conflict",
            "backend_unavailable",
            params=[SPACE],
        ),
    },
    "/v2/tokens": {
        "post": operation(
            "Issue a token (admin); the secret is shown once",
            answer(201, "TokenCreated", "issued"),
            "invalid_request",
            "forbidden",
            "backend_unavailable",
            body="TokenCreate",
        ),
        "get": operation(
            "The principals holding live tokens, their grants and token counts (admin); never a token",
            answer(200, "PrincipalList", "every principal with a live token"),
            "forbidden",
            "backend_unavailable",
        ),
    },
    "/v2/tokens/{principal}": {
        "delete": operation(
            "Revoke every token of a principal (admin)",
            answer(204, None, "revoked"),
            "forbidden",
            "not_found",
            "backend_unavailable",
            params=[param("principal", "path", NAME)],
        ),
    },
    "/v2/spaces/{space}/resources": {
        "post": operation(
            "Create a Resource", ACCEPTED, *WRITE_ERRORS, params=[SPACE, IDEMPOTENCY], body="ResourceCreate"
        ),
        "get": operation(
            "List Resources, by UID",
            answer(200, "ResourcePage", "a page"),
            "invalid_request",
            "not_found",
            "backend_unavailable",
            params=[
                SPACE,
                param("form", "query", {"type": "string"}),
                param("name", "query", NAME),
                param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100, "default": 100}),
                param("cursor", "query", {"type": "string"}),
            ],
        ),
    },
    "/v2/spaces/{space}/resources/{uid}": {
        "get": operation(
            "Read a Resource",
            answer(200, "Resource", "the Resource"),
            "not_found",
            "backend_unavailable",
            params=[SPACE, UID],
        ),
        "put": operation(
            "Replace a Resource's spec",
            ACCEPTED,
            *WRITE_ERRORS,
            params=[SPACE, UID, IDEMPOTENCY],
            body="ResourceUpdate",
        ),
        "delete": operation("Delete a Resource", ACCEPTED, *WRITE_ERRORS, params=[SPACE, UID, IDEMPOTENCY]),
    },
    "/v2/operations/{id}": {
        "get": operation(
            "Read an Operation, optionally waiting for its outcome",
            answer(200, "Operation", "the Operation"),
            "invalid_request",
            "not_found",
            "backend_unavailable",
            params=[
                param("id", "path", {"type": "string"}),
                param(
                    "wait",
                    "query",
                    {"type": "integer", "minimum": 0},
                    description="seconds to hold the answer (at most 60)",
                ),
            ],
        ),
    },
    "/v2/spaces/{space}/queues/{uid}/messages": {
        "post": operation(
            "Send messages to an AtLeastOnceQueue",
            answer(202, "MessageIds", "durably appended"),
            *QUEUE_ERRORS,
            "forbidden",
            "message_too_large",
            "payload_too_large",
            params=[SPACE, UID, IDEMPOTENCY_OPTIONAL],
            body="MessageSend",
        ),
        "get": operation(
            "Peek at messages (changes nothing)",
            answer(200, "Peek", "oldest first"),
            *QUEUE_ERRORS,
            params=[
                SPACE,
                UID,
                param("state", "query", {"enum": ["ready", "delayed", "inFlight"]}),
                param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
                param("includeBody", "query", {"type": "boolean", "default": False}),
            ],
        ),
    },
    "/v2/spaces/{space}/queues/{uid}/stats": {
        "get": operation(
            "Queue counts from the read side", answer(200, "QueueStats", "counts"), *QUEUE_ERRORS, params=[SPACE, UID]
        ),
    },
    INSTANCES: {
        "post": operation(
            "Create a workflow instance",
            answer(201, "InstanceStatus", "created (normally queued)", POSITION),
            *INSTANCE_ERRORS,
            "instance_exists",
            "invalid_params",
            "document_too_large",
            "workflow_not_ready",
            params=[SPACE, WORKFLOW, IDEMPOTENCY_INSTANCE],
            body="InstanceCreate",
        ),
        "get": operation(
            "List a workflow's instances, by ID",
            answer(200, "InstancePage", "a page"),
            "invalid_request",
            "not_found",
            "backend_unavailable",
            params=[
                SPACE,
                WORKFLOW,
                param("status", "query", INSTANCE_STATUS),
                param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100, "default": 100}),
                param("cursor", "query", {"type": "string"}),
                READ_AFTER,
            ],
        ),
    },
    INSTANCES + "/{id}": {
        "get": operation(
            "Read an instance's status",
            answer(200, "Instance", "the instance"),
            "invalid_request",
            "not_found",
            "unknown_instance",
            "backend_unavailable",
            params=[SPACE, WORKFLOW, INSTANCE, READ_AFTER],
        ),
    },
    INSTANCES + "/{id}/events": {
        "post": operation(
            "Send an event to an instance",
            answer(202, "EventSequence", "durably accepted, in the instance's acceptance order", POSITION),
            *INSTANCE_ERRORS,
            "unknown_instance",
            "instance_terminal",
            "event_queue_full",
            "invalid_params",
            "document_too_large",
            params=[SPACE, WORKFLOW, INSTANCE, IDEMPOTENCY_INSTANCE],
            body="EventSend",
        ),
    },
    INSTANCES + "/{id}/terminate": {
        "post": operation(
            "Terminate an instance (answers once its context has stopped)",
            answer(200, "InstanceStatus", "terminated, or the terminal status it already had", POSITION),
            *INSTANCE_ERRORS,
            "unknown_instance",
            params=[SPACE, WORKFLOW, INSTANCE, IDEMPOTENCY_INSTANCE],
        ),
    },
    INSTANCES + "/{id}/history": {
        "get": operation(
            "An instance's own records in commit order",
            answer(200, "History", "the history"),
            "invalid_request",
            "not_found",
            "unknown_instance",
            "backend_unavailable",
            params=[SPACE, WORKFLOW, INSTANCE, READ_AFTER],
        ),
    },
    "/v2/spaces/{space}/workers/{worker}/logs": {
        "get": operation(
            "A worker's log: what it printed and its uncaught errors; follow=true streams them",
            answer(200, "LogPage", "the last `limit` lines (follow=true: a text/event-stream of `log` events)"),
            "invalid_request",
            "not_found",
            "backend_unavailable",
            params=[
                SPACE,
                param("worker", "path", {"type": "string"}, description="ModuleWorker UID or name"),
                param("instance", "query", INSTANCE_ID, description="only this workflow instance's lines"),
                param("level", "query", {"enum": ["debug", "info", "warn", "error"]}, description="and above"),
                param("since", "query", TIME, description="from this time (RFC 3339)"),
                param("limit", "query", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
                param("follow", "query", {"type": "boolean", "default": False}, description="Server-Sent Events"),
            ],
        )
    },
    "/healthz": {"get": operation("Liveness", answer(200, "Status", "alive"), public=True)},
    "/readyz": {
        "get": operation(
            "Readiness: Kafka and Postgres reachable",
            answer(200, "Status", "ready"),
            "backend_unavailable",
            public=True,
        )
    },
    "/metrics": {
        "get": operation(
            "Prometheus metrics", {"200": {"description": "Prometheus text format", "content": {"text/plain": {}}}}
        )
    },
    "/openapi.json": {
        "get": operation("This document", {"200": {"description": "OpenAPI 3.1", "content": {JSON: {}}}}, public=True)
    },
}


def operation_id(method: str, path: str) -> str:
    """`get_v2_spaces_space_resources` for GET /v2/spaces/{space}/resources: unique, stable, plain."""
    return "_".join([method, *re.findall(r"[a-z0-9]+", path.lower())])


SPACE_OF_REQUEST = {"space": "$request.path.space"}
RESOURCE_OF_OPERATION = {**SPACE_OF_REQUEST, "uid": "$response.body#/resourceUid"}
INSTANCE_OF_ANSWER = {**SPACE_OF_REQUEST, "uid": "$request.path.uid", "id": "$response.body#/id"}
RESOURCE_PATH = "/v2/spaces/{space}/resources/{uid}"
QUEUE_PATHS = ["/v2/spaces/{space}/queues/{uid}/messages", "/v2/spaces/{space}/queues/{uid}/stats"]
# What each answer's IDs open (OpenAPI links), so that a client or a stateful fuzzer reaches
# every operation with real IDs: (source method, path, status) -> [(target path, parameters)].
LINKS: dict[tuple[str, str, str], list[tuple[str, dict[str, str]]]] = {
    ("post", "/v2/spaces", "201"): [
        (p, {"space": "$response.body#/name"}) for p in ("/v2/spaces/{space}", "/v2/spaces/{space}/resources")
    ],
    ("post", "/v2/tokens", "201"): [("/v2/tokens/{principal}", {"principal": "$response.body#/principal"})],
    **{
        (method, path, "202"): [
            ("/v2/operations/{id}", {"id": "$response.body#/id"}),
            *((p, RESOURCE_OF_OPERATION) for p in (RESOURCE_PATH, *QUEUE_PATHS, INSTANCES)),
        ]
        for method, path in (("post", "/v2/spaces/{space}/resources"), ("put", RESOURCE_PATH))
    },
    ("post", INSTANCES, "201"): [
        (INSTANCES + tail, INSTANCE_OF_ANSWER) for tail in ("/{id}", "/{id}/events", "/{id}/terminate", "/{id}/history")
    ],
}


def _linked(paths: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """PATHS with an operationId on every operation and the LINKS on the answers they start from."""
    out = {
        path: {m: {**op, "operationId": operation_id(m, path)} for m, op in item.items()}
        for path, item in paths.items()
    }
    for (method, path, status), targets in LINKS.items():
        answer_ = out[path][method]["responses"][status]
        answer_["links"] = {
            operation_id(m, target): {"operationId": operation_id(m, target), "parameters": params}
            for target, params in targets
            for m in out[target]
        }
    return out


DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "sumi Host API",
        "version": "2.0.0",
        "description": "The Takoform Host API v2 as this Host defines it (host-api.md).",
    },
    "servers": [{"url": "/"}],
    "paths": _linked(PATHS),
    "components": {"schemas": SCHEMAS, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    "security": [{"bearer": []}],
}


def document() -> dict[str, Any]:
    return DOCUMENT
