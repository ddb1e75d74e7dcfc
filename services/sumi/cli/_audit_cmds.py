"""`sumi replay [--until T]` and `sumi audit THING`: the audit, from the topics alone."""

import asyncio
import datetime
import json
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from sumi.cli._errors import FAILED, USAGE, CliError
from sumi.cli._host_cmds import settings
from sumi.cli._output import err
from sumi.cli._state import globals_of


def register(app: typer.Typer) -> None:
    app.command(
        help="Rebuild every read model from the topics into a fresh schema and compare it with the live one;"
        " with --until, the read models as they stood at that moment, kept in a schema of their own."
    )(replay)
    app.command(
        help="Every record about one Resource UID, message ID or instance ID, in commit order, decoded,"
        " with topic, partition and offset (-o json: one JSON object a line)."
    )(audit)


def epoch_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise CliError(f"--until {text!r}: neither RFC 3339 nor epoch milliseconds", USAGE) from e
    if moment.tzinfo is None:
        raise CliError(f"--until {text!r}: give the time zone (e.g. Z)", USAGE)
    return int(moment.timestamp() * 1000)


def replay(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(help="seconds the replay may take")] = 120.0,
    until: Annotated[str | None, typer.Option(help="RFC 3339 time or epoch ms: the read models as of then")] = None,
    schema: Annotated[str | None, typer.Option(help="with --until: the schema to rebuild into")] = None,
) -> int:
    from sumi.host.audit import replay_and_compare, replay_until

    config = settings()
    if until is None:
        with _spinner("replaying every topic"):
            audit = asyncio.run(replay_and_compare(config, timeout))
        for line in audit.lines():
            print(line)
        verdict = "identical" if not audit.differences else f"{len(audit.differences)} differences"
        print(f"replay: {verdict}; {len(audit.quarantined)} records quarantined")
        return 0 if not audit.differences else FAILED
    moment = epoch_ms(until)
    target = schema or f"{config.db_schema}_at_{moment}"
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err) as bar:
        task = bar.add_task(f"replaying up to {until}", total=4)
        audit = asyncio.run(replay_until(config, moment, target, timeout, lambda: bar.advance(task)))
    for line in audit.lines():
        print(line)
    print(f"replay: the read models as of {until} are in the schema {target}; {len(audit.quarantined)} quarantined")
    return 0


def audit(
    ctx: typer.Context,
    thing: Annotated[str, typer.Argument(metavar="RESOURCE|MESSAGE|INSTANCE", help="a UID or an ID")],
    workflow: Annotated[
        str | None, typer.Option(help="an instance's workflow UID (instance IDs are per workflow)")
    ] = None,
) -> int:
    from sumi.host.audit import records_about

    g = globals_of(ctx)
    with _spinner(f"reading every topic for {thing}"):
        cited = asyncio.run(records_about(settings(), thing, workflow))
    for c in cited:
        print(json.dumps(c.as_json(), ensure_ascii=False) if g.output == "json" else c.line())
    if not cited:
        raise CliError(f"no record mentions {thing!r}", 3)
    return 0


def _spinner(what: str) -> Progress:
    bar = Progress(SpinnerColumn(), TextColumn(what), TimeElapsedColumn(), console=err, transient=True)
    bar.add_task(what, total=None)
    return bar
