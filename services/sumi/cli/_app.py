"""The Typer application, its global options, and main(): exit codes from every failure."""

import sys
from typing import Annotated

import typer

# Typer carries its own Click; its exceptions are the ones raised.
from typer._click.exceptions import ClickException, UsageError

from sumi.cli import _admin_cmds, _audit_cmds, _data_cmds, _host_cmds, _resource_cmds, logs
from sumi.cli._errors import USAGE, CliError
from sumi.cli._output import FORMATS, problem
from sumi.cli._state import Globals, hoist
from sumi.core.config import Settings
from sumi.core.logs import configure as configure_logs

app = typer.Typer(
    name="sumi",
    help="sumi: a self-hostable, event-sourced Host for QueueConsumer 0.3.0 and DurableWorkflow 0.3.0.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _globals(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="the gateway's base URL [env SUMI_URL; the context's]")] = None,
    token: Annotated[str | None, typer.Option(help="a bearer token [env SUMI_TOKEN; the context's]")] = None,
    space: Annotated[str | None, typer.Option(help="the Space [env SUMI_SPACE; the context's]")] = None,
    context: Annotated[str | None, typer.Option(help="a context of the profile file [env SUMI_CONTEXT]")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table, json or yaml")] = "table",
) -> None:
    if output not in FORMATS:
        raise typer.BadParameter(f"{output!r} is not one of {', '.join(FORMATS)}", param_hint="--output")
    ctx.obj = Globals(url, token, space, context, output)


for module in (_host_cmds, _resource_cmds, _data_cmds, _admin_cmds, _audit_cmds, logs):
    module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (sumi.cli._errors), never a traceback for a refusal."""
    try:
        config = Settings.from_env()
        configure_logs(config.log_format, config.log_level)
    except ValueError:  # refused settings: the Host's commands say so; a client's need none of them
        configure_logs("text", "WARNING")
    args = hoist(list(sys.argv[1:] if argv is None else argv))
    fmt = _format_of(args)
    try:
        result = typer.main.get_command(app).main(args=args, prog_name="sumi", standalone_mode=False)
    except CliError as e:
        problem(e, fmt)
        return e.code
    except typer.Abort:
        return 130
    except ClickException as e:
        e.show()
        return USAGE if isinstance(e, UsageError) else e.exit_code
    return result if isinstance(result, int) else 0


def _format_of(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg in ("-o", "--output") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--output="):
            return arg.split("=", 1)[1]
    return "table"
