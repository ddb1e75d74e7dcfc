"""Pure decisions: (state, command, now) -> records. No I/O here.

Every command ends in exactly one CommandDecided, the reply the gateway waits
for. Accepted resource commands also start an Operation and ask for an
`operation.apply` follow-up, so that an Operation is visibly pending before it
runs and a crash between the two steps is resumed from the log (QC-48).

A command's payload is decoded once (`sumi.core.commands`) into its typed
command; one that does not decode is rejected `invalid_request`. Nothing a single
command holds may stop the processor: an unexpected error while deciding it is
logged and the command rejected, and the processor goes on with the next one.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sumi.control.rules.forms import FORMS
from sumi.control.rules.forms._base import NAME_RE, ResourceView
from sumi.control.rules.forms.durable_workflow import counts_of, summed
from sumi.control.rules.forms.durable_workflow import observations as workflow_observations
from sumi.control.rules.forms.names import DURABLE_WORKFLOW, MODULE_WORKER, WORKER_DEPLOYMENT, WORKER_VERSION
from sumi.control.rules.forms.worker_deployment import active_deployment
from sumi.control.rules.forms.worker_version import worker_of
from sumi.control.rules.state import ControlState, OperationView, SpaceState, evolve
from sumi.core import commands as c
from sumi.core import ids
from sumi.core import records as r
from sumi.core.canonical import canonical
from sumi.core.problems import FieldError, Problem

log = logging.getLogger(__name__)

Records = list[r.ControlRecord]


@dataclass
class Decision:
    events: Records = field(default_factory=list)
    followups: list[r.CommandSubmitted] = field(default_factory=list)


def decide(state: ControlState, cmd: r.CommandSubmitted, now: int) -> Decision:
    try:
        decision = _decide(state, cmd, c.decode(cmd.kind, cmd.payload), now)
        if cmd.kind.startswith(("resource.", "operation.")) and cmd.space in state.spaces:
            decision.events = _observe_workers(state.space(cmd.space), decision.events, now)
            decision.events = _observe_workflows(state.space(cmd.space), decision.events, now)
    except Problem as problem:
        return _reject(cmd, now, problem)
    except Exception as exc:  # a bug or an input no rule foresaw: this command fails, not the processor
        log.exception("command %s (%s) could not be decided", cmd.commandId, cmd.kind)
        return _reject(cmd, now, Problem("backend_unavailable", f"the command could not be decided: {exc!r}"))
    return decision


def _decide(state: ControlState, cmd: r.CommandSubmitted, command: c.Command, now: int) -> Decision:
    match command:
        case c.SpaceCreate():
            return _space_create(state, cmd, command, now)
        case c.SpaceDelete():
            return _space_delete(state, cmd, command, now)
        case c.TokenCreate():
            return _token_create(state, cmd, command, now)
        case c.TokenRevoke():
            return _token_revoke(state, cmd, command, now)
        case c.ResourceCreate():
            return _resource_create(state, cmd, command, now)
        case c.ResourceUpdate():
            return _resource_update(state, cmd, command, now)
        case c.ResourceDelete():
            return _resource_delete(state, cmd, command, now)
        case c.OperationApply():
            return _operation_apply(state, cmd, command, now)
        case c.OperationReport():
            return _operation_report(state, cmd, command, now)
        case c.ResourceObserve():
            return _resource_observe(state, cmd, command, now)


def _decided(
    cmd: r.CommandSubmitted,
    now: int,
    status: int,
    *,
    operation_id: str | None = None,
    result: Mapping[str, str | int] | None = None,
) -> r.CommandDecided:
    return r.CommandDecided(
        commandId=cmd.commandId,
        space=cmd.space,
        principal=cmd.principal,
        kind=cmd.kind,
        accepted=True,
        status=status,
        decidedAt=now,
        operationId=operation_id,
        result=None if result is None else canonical(result),
        idempotencyKey=cmd.idempotencyKey,
        fingerprint=cmd.fingerprint,
    )


def _reject(cmd: r.CommandSubmitted, now: int, problem: Problem) -> Decision:
    return Decision(
        [
            r.CommandDecided(
                commandId=cmd.commandId,
                space=cmd.space,
                principal=cmd.principal,
                kind=cmd.kind,
                accepted=False,
                status=problem.status,
                decidedAt=now,
                problem=canonical(problem.to_json()),
            )
        ]
    )


# ---- Spaces and tokens -----------------------------------------------------------------------


def _space_create(state: ControlState, cmd: r.CommandSubmitted, args: c.SpaceCreate, now: int) -> Decision:
    name = args.name
    if not NAME_RE.match(name):
        raise Problem("invalid_request", "a Space name matches ^[a-z0-9][a-z0-9-]{0,62}$")
    if state.space_exists(name):
        raise Problem("name_conflict", f"Space {name} exists")
    return Decision([r.SpaceCreated(name, now), _decided(cmd, now, 201, result={"name": name, "createdAt": now})])


def _space_delete(state: ControlState, cmd: r.CommandSubmitted, args: c.SpaceDelete, now: int) -> Decision:
    name = args.name
    if not state.space_exists(name):
        raise Problem("not_found", f"no Space {name}")
    if state.space(name).resources:
        raise Problem("dependency_conflict", f"Space {name} still holds Resources")
    return Decision([r.SpaceDeleted(name, now), _decided(cmd, now, 204)])


def _token_create(state: ControlState, cmd: r.CommandSubmitted, args: c.TokenCreate, now: int) -> Decision:
    missing = [g.space for g in args.grants if not state.space_exists(g.space)]
    if missing:
        raise Problem("invalid_request", f"grant names a Space that does not exist: {missing[0]}")
    grants = tuple({"space": g.space, "role": g.role} for g in args.grants)
    return Decision(
        [
            r.TokenIssued(args.principal, args.token_hash, args.admin, now, grants),
            _decided(cmd, now, 201, result={"principal": args.principal}),
        ]
    )


def _token_revoke(state: ControlState, cmd: r.CommandSubmitted, args: c.TokenRevoke, now: int) -> Decision:
    return Decision([r.TokensRevoked(args.principal, now), _decided(cmd, now, 204)])


# ---- Resources -------------------------------------------------------------------------------


def _replayed(space: SpaceState, cmd: r.CommandSubmitted, now: int) -> Decision | None:
    """QC-46, WF-16: the same key and request is the same Operation; another request is 422."""
    if not cmd.idempotencyKey:
        return None
    seen = space.idempotency.get((cmd.principal, cmd.idempotencyKey))
    if seen is None:
        return None
    fingerprint, operation_id = seen
    if fingerprint != cmd.fingerprint:
        raise Problem("idempotency_key_reused", "this Idempotency-Key was used with another method, path or body")
    return Decision([_decided(cmd, now, 202, operation_id=operation_id)])


def _live_space(state: ControlState, cmd: r.CommandSubmitted) -> SpaceState:
    if not state.space_exists(cmd.space):
        raise Problem("not_found", f"no Space {cmd.space}")
    return state.space(cmd.space)


def _check_private_inputs(private: Mapping[str, object] | None) -> None:
    # QC-10, WF-1: none of the supported Forms takes secret inputs.
    if private:
        raise Problem(
            "invalid_spec", "this Form accepts no privateInputs", [FieldError("/privateInputs", "must be empty")]
        )


def _spec_errors(form_url: str, spec: Mapping[str, object]) -> None:
    errors = FORMS[form_url].validate_spec(spec)
    if errors:
        raise Problem("invalid_spec", "the spec does not satisfy the Form", errors)


def _start(cmd: r.CommandSubmitted, kind: str, uid: str, generation: int, now: int, events: Records) -> Decision:
    op_id = ids.operation_id(cmd.commandId)
    apply = c.submitted(
        c.OperationApply(operation_id=op_id),
        command_id=f"{cmd.commandId}.apply",
        space=cmd.space,
        principal=cmd.principal,
        admin=cmd.admin,
        now=now,
    )
    return Decision(
        [
            r.OperationStarted(op_id, kind, cmd.space, uid, generation, cmd.principal, now),
            *events,
            _decided(cmd, now, 202, operation_id=op_id),
        ],
        [apply],
    )


def _resource_create(state: ControlState, cmd: r.CommandSubmitted, args: c.ResourceCreate, now: int) -> Decision:
    space = _live_space(state, cmd)
    replay = _replayed(space, cmd, now)
    if replay:
        return replay
    form_url, name, spec = args.form, args.name, args.spec
    if not NAME_RE.match(name):
        raise Problem("invalid_request", "name must match ^[a-z0-9][a-z0-9-]{0,62}$")
    if form_url not in FORMS:
        raise Problem("unsupported_form", f"this Host does not support the Form {form_url!r}")
    _check_private_inputs(args.private_inputs)
    _spec_errors(form_url, spec)
    if space.by_ref(name) is not None:
        raise Problem("name_conflict", f"a Resource named {name} exists in Space {space.name}")
    problem = FORMS[form_url].check_references(space, spec, None)
    if problem:
        raise problem
    uid = ids.resource_uid(cmd.commandId)
    events: Records = [
        r.ResourceCreated(uid, space.name, name, form_url, canonical(spec), 1, ids.operation_id(cmd.commandId), now)
    ]
    observed = FORMS[form_url].initial_observed(spec)
    if observed is not None:  # e.g. a WorkerVersion is {"verified": false} while it verifies
        events.append(r.ResourceObserved(uid, space.name, canonical(observed), now))
    return _start(cmd, "create", uid, 1, now, events)


def _target(space: SpaceState, ref: str) -> ResourceView:
    resource = space.by_ref(ref)
    if resource is None:
        raise Problem("not_found", f"no Resource {ref} in Space {space.name}")
    if space.unfinished_operation(resource.uid) is not None:
        raise Problem("resource_busy", f"Resource {resource.uid} has an unfinished Operation")
    return resource


def _resource_update(state: ControlState, cmd: r.CommandSubmitted, args: c.ResourceUpdate, now: int) -> Decision:
    space = _live_space(state, cmd)
    replay = _replayed(space, cmd, now)
    if replay:
        return replay
    resource = _target(space, args.ref)
    form = FORMS[resource.form]
    _check_private_inputs(args.private_inputs)
    _spec_errors(resource.form, args.spec)
    errors = form.check_update(resource.spec, args.spec)
    if errors:
        raise Problem("invalid_spec", "an immutable field changed", errors)
    problem = form.check_references(space, args.spec, resource.uid)
    if problem:
        raise problem
    generation = resource.generation + 1
    return _start(
        cmd,
        "update",
        resource.uid,
        generation,
        now,
        [
            r.ResourceUpdated(
                resource.uid, space.name, canonical(args.spec), generation, ids.operation_id(cmd.commandId), now
            ),
            r.ResourceStateChanged(resource.uid, space.name, "updating", now),
        ],
    )


def _resource_delete(state: ControlState, cmd: r.CommandSubmitted, args: c.ResourceDelete, now: int) -> Decision:
    space = _live_space(state, cmd)
    replay = _replayed(space, cmd, now)
    if replay:
        return replay
    resource = _target(space, args.ref)
    problem = FORMS[resource.form].check_delete(space, resource)
    if problem:
        raise problem
    return _start(
        cmd,
        "delete",
        resource.uid,
        resource.generation,
        now,
        [r.ResourceStateChanged(resource.uid, space.name, "deleting", now)],
    )


def _operation_apply(state: ControlState, cmd: r.CommandSubmitted, args: c.OperationApply, now: int) -> Decision:
    """Carry an accepted Operation out.

    Forms whose effect is the log itself finish here. A Form with an effect
    outside the control log (a Version to verify, a Consumer to attach or
    detach) says "await": the Operation stays running until the service that
    owns the effect reports it with `operation.report`."""
    space = state.space(cmd.space)
    op = space.operations.get(args.operation_id)
    if op is None or op.state != "pending":
        return Decision()  # already carried out before a restart: nothing twice
    running = r.OperationStateChanged(op.id, space.name, "running", "none", now)
    resource = space.resources.get(op.resource_uid)
    form = FORMS[resource.form] if resource is not None else None
    if resource is not None and form is not None and form.completion(op.kind, space, resource) == "await":
        # An Operation that waits on other Resources may already be decidable (settle).
        outcome = form.settle(op.kind, space, resource)
        if outcome == "wait":
            return Decision([running])
        return Decision([running, *_settled(space, op, outcome, now)])
    return Decision([running, *_finish(space, op, now, succeeded=True)])


def _settled(space: SpaceState, op: OperationView, outcome: "str | Problem", now: int) -> Records:
    if isinstance(outcome, Problem):
        return _finish(space, op, now, succeeded=False, error=canonical(outcome.to_json()))
    return _finish(space, op, now, succeeded=True)


def _finish(space: SpaceState, op: OperationView, now: int, *, succeeded: bool, error: str | None = None) -> Records:
    """The records that end `op`; `error` is the Problem, in canonical JSON, a failure carries."""
    if not succeeded:
        events: Records = []
        if op.kind == "create":  # a failed create leaves no Resource behind; its name is free
            events.append(r.ResourceDeleted(op.resource_uid, space.name, op.id, now))
        elif op.resource_uid in space.resources:
            if op.kind == "update" and op.previous_spec is not None:
                # A failed update leaves the previous spec in force (effect "none"). The
                # generation stays the one the accepted PUT was given: generations count
                # accepted PUTs, and the log shows the spec going back.
                events.append(
                    r.ResourceUpdated(
                        op.resource_uid, space.name, canonical(op.previous_spec), op.generation, op.id, now
                    )
                )
            events.append(r.ResourceStateChanged(op.resource_uid, space.name, "active", now))
        return events + [r.OperationStateChanged(op.id, space.name, "failed", "none", now, error)]
    done = r.OperationStateChanged(op.id, space.name, "succeeded", "complete", now)
    if op.kind == "delete":
        return [r.ResourceDeleted(op.resource_uid, space.name, op.id, now), done]
    return [r.ResourceStateChanged(op.resource_uid, space.name, "active", now), done]


def _operation_report(state: ControlState, cmd: r.CommandSubmitted, args: c.OperationReport, now: int) -> Decision:
    """An owning service reports the outcome of an awaited Operation (and what it observed).

    `outcome` is succeeded | failed | reconciling; a report for an Operation that has
    already ended changes nothing, so a service may repeat a report after a crash."""
    space = state.space(cmd.space)
    op = space.operations.get(args.operation_id)
    if op is None or op.state in ("succeeded", "failed"):
        return Decision()
    if args.partition is not None and args.partitions is not None:
        return _part_report(space, op, args.partition, args.partitions, now)
    events: Records = []
    if args.observed is not None and op.resource_uid in space.resources:
        events.append(r.ResourceObserved(op.resource_uid, space.name, canonical(args.observed), now))
    error = canonical(args.error) if args.error else None
    if args.outcome == "reconciling":
        events.append(r.OperationStateChanged(op.id, space.name, "reconciling", args.effect or "unknown", now, error))
        return Decision(events)
    events += _finish(space, op, now, succeeded=args.outcome == "succeeded", error=error)
    return Decision(events + _settle_waiting(space, events, op.id, now))


def _part_report(space: SpaceState, op: OperationView, partition: int, partitions: int, now: int) -> Decision:
    """One partition's share of the Operation is done (WF-13: its instances there purged, by the
    engine that owns it). Recorded once however often it is reported (a crash, a rebalance); the
    Operation succeeds with the share that completes partitions 0..partitions-1."""
    if partition in op.parts_done:
        return Decision()
    events: Records = [r.OperationPartSucceeded(op.id, space.name, partition, now)]
    if not set(range(partitions)) <= op.parts_done | {partition}:
        return Decision(events)
    events += _finish(space, op, now, succeeded=True)
    return Decision(events + _settle_waiting(space, events, op.id, now))


def _after(space: SpaceState, events: Records, operations: bool = True) -> SpaceState:
    """The Space as it will be once `events` are folded (a scratch copy; state is untouched).
    Without `operations` only the Resources are carried (cheaper)."""
    ops = (
        {k: replace(v) for k, v in space.operations.items() if v.state not in ("succeeded", "failed")}
        if operations
        else {}
    )
    copy = SpaceState(space.name, space.exists, dict(space.resources), ops)
    scratch = ControlState({space.name: copy})
    for event in events:
        evolve(scratch, event)
    return scratch.space(space.name)


def _settle_waiting(space: SpaceState, events: Records, ended: str, now: int) -> Records:
    """An awaited Operation ended: every running Operation that waits on other Resources
    (a Deployment weighting a Version that was verifying) and can now be decided ends in
    this same decision (WF-4, WF-6)."""
    after = _after(space, events)
    out: Records = []
    for op in list(after.operations.values()):
        if op.id == ended or op.state != "running":
            continue
        resource = after.resources.get(op.resource_uid)
        if resource is None:
            continue
        outcome = FORMS[resource.form].settle(op.kind, after, resource)
        if outcome != "wait":
            out += _settled(after, op, outcome, now)
    return out


def _observe_workers(space: SpaceState, events: Records, now: int) -> Records:
    """ModuleWorker observed `{"activeDeployment": {"resourceUid"} | null, "versions": n}`,
    recorded whenever a decision changes a worker, its Versions or its Deployment."""
    worker_forms = (MODULE_WORKER, WORKER_VERSION, WORKER_DEPLOYMENT)
    created = {e.uid: e.form for e in events if isinstance(e, r.ResourceCreated)}

    def form_of(uid: str) -> str | None:
        return created.get(uid) or getattr(space.resources.get(uid), "form", None)

    touched = {e.uid for e in events if isinstance(e, _RESOURCE_EVENTS) and form_of(e.uid) in worker_forms}
    if not touched:
        return events
    after = _after(space, events, operations=False)
    workers: set[str] = set()
    for uid in touched:
        resource = after.resources.get(uid) or space.resources.get(uid)
        if resource is None:
            continue
        if resource.form == MODULE_WORKER:
            workers.add(uid)
        elif resource.form in (WORKER_VERSION, WORKER_DEPLOYMENT) and worker_of(resource.spec):
            workers.add(str(worker_of(resource.spec)))
    observations: Records = []
    for uid in sorted(workers):
        worker = after.resources.get(uid)
        if worker is None or worker.form != MODULE_WORKER:
            continue
        active = active_deployment(after, uid)
        observed = {
            "activeDeployment": {"resourceUid": active.uid} if active else None,
            "versions": sum(
                1 for v in after.resources.values() if v.form == WORKER_VERSION and worker_of(v.spec) == uid
            ),
        }
        if dict(worker.observed) != observed:
            observations.append(r.ResourceObserved(uid, space.name, canonical(observed), now))
    return _with_observations(events, observations)


def _with_observations(events: Records, observations: Records) -> Records:
    if not observations:
        return events
    # Right after the last Resource record: before the Operation is seen to end (read your writes).
    last = max(i for i, e in enumerate(events) if isinstance(e, _RESOURCE_EVENTS))
    return events[: last + 1] + observations + events[last + 1 :]


def _observe_workflows(space: SpaceState, events: Records, now: int) -> Records:
    """DurableWorkflow observed (WF-9): `ready` follows the worker's allocation in force."""
    touched = {e.uid for e in events if isinstance(e, _RESOURCE_EVENTS)}
    created = any(isinstance(e, r.ResourceCreated) and e.form == DURABLE_WORKFLOW for e in events)
    if not touched or not (created or any(v.form == DURABLE_WORKFLOW for v in space.resources.values())):
        return events
    after = _after(space, events)
    found = workflow_observations(after, touched, now)
    return _with_observations(events, [r.ResourceObserved(uid, space.name, canonical(o), now) for uid, o in found])


def _resource_observe(state: ControlState, cmd: r.CommandSubmitted, args: c.ResourceObserve, now: int) -> Decision:
    """The Host's last confirmed observation of a Resource (QC-35, WF-9)."""
    space = state.space(cmd.space)
    resource = space.resources.get(args.uid)
    if resource is not None and args.partition is not None:
        return _counts_report(space, resource, args.partition, args.observed, now)
    if resource is None or dict(resource.observed) == args.observed:
        return Decision()
    observed = FORMS[resource.form].reported(space, resource, args.observed, now)
    return Decision([r.ResourceObserved(resource.uid, space.name, canonical(observed), now)])


def _counts_report(
    space: SpaceState, resource: ResourceView, partition: int, observed: Mapping[str, object], now: int
) -> Decision:
    """One partition's instance counts of a DurableWorkflow (WF-9), from the engine that owns the
    partition: kept per partition, observed as their sum. The same counts again change nothing."""
    if resource.form != DURABLE_WORKFLOW:
        raise Problem("invalid_request", "only a DurableWorkflow's instance counts are reported per partition")
    counts = counts_of(observed.get("instanceCounts"))
    parts = space.instance_counts.get(resource.uid, {})
    if counts == counts_of(parts.get(partition)):
        return Decision()
    total = summed({**parts, partition: counts}.values())
    seen = FORMS[resource.form].reported(space, resource, {"instanceCounts": total}, now)
    return Decision(
        [
            r.InstanceCountsObserved(resource.uid, space.name, partition, counts, now),
            r.ResourceObserved(resource.uid, space.name, canonical(seen), now),
        ]
    )


_RESOURCE_EVENTS = (r.ResourceCreated, r.ResourceUpdated, r.ResourceStateChanged, r.ResourceObserved, r.ResourceDeleted)
