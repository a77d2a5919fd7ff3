"""The CLI's terminal side: user errors and the storage's refusals as one line, SIGTERM and
Ctrl-C as a clean exit within seconds."""

from __future__ import annotations

import errno
import logging
import os
import shlex
import signal
import threading
import warnings
from contextlib import contextmanager
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from tasks.core.errors import UserError

if TYPE_CHECKING:
    from typer._click import Context  # typer's own click, which its commands derive from

STOP_GRACE_S = 5.0  # how long a stopped command may wait for its `with` blocks and atexit hooks
console = Console(stderr=True)
VERBOSE = {"on": False}
# OS errors that say what is wrong with the user's storage, not with the program: one line each, like a UserError.
STORAGE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG})
# Prefect warns as it is imported when it cannot make PREFECT_HOME: `server.check_home` says so in one line instead.
warnings.filterwarnings("ignore", "Failed to create the Prefect home directory", UserWarning)


def one_line(error: BaseException | None) -> str | None:
    """The line a `UserError` or a storage refusal (`STORAGE_ERRORS`: disk full, read-only, no permission, a name
    too long) is reported as; None for any other error (a bug: its traceback is the report)."""
    if isinstance(error, UserError):
        return str(error)
    if isinstance(error, OSError) and error.errno in STORAGE_ERRORS:
        return f"{error.strerror}: {error.filename}" if error.filename else str(error)
    return None


def stop_on_signals() -> None:
    """Make SIGTERM raise SystemExit(143) and Ctrl-C (SIGINT) KeyboardInterrupt in the main thread, so `with` blocks
    and atexit hooks run (a temporary Prefect server is stopped), and end the process with 128 + the signal's number
    `STOP_GRACE_S` later if it is still waiting then: for a task in flight on a worker thread, which Python cannot
    interrupt. What that task had not persisted the next run computes, as after a kill (every output is published
    atomically). Call it from the main thread: only there can Python install signal handlers."""

    def handler(signum: int, frame: Any) -> None:
        deadline = threading.Timer(STOP_GRACE_S, _end, (128 + signum,))
        deadline.daemon = True
        deadline.start()
        if signum == signal.SIGINT:
            signal.default_int_handler(signum, frame)
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)


def _end(code: int) -> None:
    console.print(f"stopped {STOP_GRACE_S:g} s after the signal, without waiting for the task in flight: rerun the "
                  "command to resume from what it finished", highlight=False, soft_wrap=True)
    os._exit(code)


def _no_user_error_tracebacks(record: logging.LogRecord) -> bool:
    """A logging filter: drop a record carrying an error `one_line` reports (Prefect logs a failing flow's or task's
    exception with its traceback), which `user_errors` prints as its one line; keep every record with --verbose."""
    return VERBOSE["on"] or one_line(record.exc_info[1] if record.exc_info else None) is None


@contextmanager
def user_errors():
    """A `UserError` or a storage refusal anywhere below, in a flow too, becomes one line and exit code 2 (the
    traceback with --verbose): while the block runs, the terminal's log handlers drop records that carry one."""
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(_no_user_error_tracebacks)
    try:
        yield
    except (UserError, OSError) as err:
        if VERBOSE["on"] or (line := one_line(err)) is None:
            raise
        _exit_with(line)
    finally:
        for handler in handlers:
            handler.removeFilter(_no_user_error_tracebacks)


def _exit_with(line: str) -> NoReturn:
    console.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2) from None


def refuse_empty_paths(group: TyperGroup, ctx: Context, typed: list[str]) -> None:
    """One `error:` line and exit code 2 when a path is given as '' (typer reads it as `.`, the folder the command
    runs in), naming the parameter and echoing the command line `typed`, before any callback runs. An empty value of
    another type is left to its own check; a line click cannot parse, to click."""
    try:
        params, raw, leaf = _leaf_params(group, ctx, typed)
    except typer.TyperException:
        return
    for param in params:
        given = raw.get(param.name)
        if "" in (given if isinstance(given, (list, tuple)) else [given]) and _holds_path(leaf.params.get(param.name)):
            label = param.opts[0] if param.param_type_name == "option" else param.name.upper()
            _exit_with(f"`cfgen {' '.join(shlex.quote(arg) for arg in typed)}`: {label} is empty; give a path")


def _leaf_params(group: TyperGroup, ctx: Context, typed: list[str]) -> tuple[list[Any], dict[str, Any], Context]:
    """The parameters of the command `typed` names below `group`, their raw values and a context of the converted
    ones (parsed leniently: nothing runs)."""
    command: Any = group
    rest, name = typed, None
    while isinstance(command, TyperGroup):
        _, rest, _ = command.make_parser(ctx).parse_args(args=list(rest))
        if not rest:
            return [], {}, ctx
        name, command, rest = command.resolve_command(ctx, rest)
    leaf = command.make_context(name, list(rest), parent=ctx, resilient_parsing=True)
    raw, _, _ = command.make_parser(leaf).parse_args(args=list(rest))
    return command.params, raw, leaf


def _holds_path(value: Any) -> bool:
    return isinstance(value, PurePath) or (isinstance(value, (list, tuple)) and any(map(_holds_path, value)))


class OneLineUsage(TyperCommand):
    """A command whose bad parameters (a value outside its declared range or of another type, a missing argument)
    are one `error:` line and exit code 2 like a UserError, instead of the usage panel: parsed before any work."""

    def make_context(self, info_name: str | None, args: list[str], parent: Context | None = None,
                     **extra: Any) -> Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except typer.BadParameter as err:
            _exit_with(f"{err.ctx.command_path if err.ctx else info_name}: {err.format_message()}")


def show_json(result: Any) -> None:
    console.print_json(data=result)
