"""The Typer app: the root callback, the commands, core errors and signals mapped to exit
codes. Every command runs inside :func:`_user_errors`, so a command module only raises."""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any, Final, NoReturn

import typer
from typer.core import TyperGroup

from grpo_cli import __version__
from grpo_cli.cli.compare import compare_cmd
from grpo_cli.cli.compute import compute_cmd
from grpo_cli.cli.explain import explain_cmd
from grpo_cli.cli.help import HelpCommand, PlainParsing, epilog
from grpo_cli.cli.params import declares_options, flag_spelling
from grpo_cli.cli.plot import plot_cmd
from grpo_cli.cli.presets import presets_cmd
from grpo_cli.cli.signals import (
    EXIT_CODES,
    command_started,
    exit_decided,
    on_signal,
    raised_signal,
    stopped_line,
)
from grpo_cli.cli.summarize import summarize_cmd
from grpo_cli.cli.typer_private import NoArgsIsHelpError, NoSuchOption, UsageError, completion
from grpo_cli.cli.verify import verify_cmd
from grpo_cli.core.errors import (
    EXIT_OK,
    EXIT_USAGE,
    GrpoAdvError,
    MemoryShortError,
    OptionsError,
    OutputError,
    Terminated,
    first_line,
    option,
)
from grpo_cli.io.interrupts import SIGNALS


class _Group(PlainParsing, TyperGroup):
    """The root command group: Click's usage errors (an unknown option, a bad value, a
    missing argument) in grpo-adv's one style, ``error:`` and ``hint:`` on stderr, exit 2,
    with "did you mean" for option names."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        _shell_completion(sys.argv[1:] if args is None else list(args))
        given = (args, prog_name, complete_var, False, windows_expand_args)
        if not standalone_mode:
            return super().main(*given, **extra)
        try:
            returned = super().main(*given, **extra)
        except NoArgsIsHelpError as exc:
            exc.show()  # the help, as Click shows it
            sys.exit(EXIT_USAGE)
        except UsageError as exc:
            _say(_usage_error(exc))
            sys.exit(EXIT_USAGE)
        sys.exit(returned if isinstance(returned, int) else EXIT_OK)


COMPLETION_SHELLS: Final = ("bash", "zsh", "fish", "powershell", "pwsh")
_COMPLETION_FLAGS: Final = ("--install-completion", "--show-completion")


def _shell_completion(args: Sequence[str]) -> None:
    """``--install-completion SHELL`` and ``--show-completion SHELL`` (or ``=SHELL``) for
    the shell named (Typer's flags take none: they act for the detected shell), then exit
    0; an unknown shell is a usage error. Only the options before the command count."""
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            return  # the command: its own arguments follow
        flag, has_value, value = arg.partition("=")
        if flag not in _COMPLETION_FLAGS:
            continue
        if not has_value:
            value = args[i + 1] if i + 1 < len(args) else ""
            if not value or value.startswith("-"):
                return  # Typer's flag: the detected shell
        shell = value.lower()
        if shell not in COMPLETION_SHELLS:
            _say(
                OptionsError(
                    f"no completion for the shell {value!r}",
                    hint=f"choose one of: {', '.join(COMPLETION_SHELLS)}",
                )
            )
            sys.exit(EXIT_USAGE)
        get_completion_script, install = completion()

        names = {"prog_name": "grpo-adv", "complete_var": "_GRPO_ADV_COMPLETE"}
        if flag == "--install-completion":
            shell, path = install(shell=shell, **names)
            typer.secho(f"{shell} completion installed in {path}", fg="green")
            typer.echo("Completion will take effect once you restart the terminal")
        else:
            typer.echo(get_completion_script(shell=shell, **names))
        sys.exit(EXIT_OK)


def _usage_error(exc: Any) -> OptionsError:
    """One line and a hint for a Click usage error."""
    ctx = getattr(exc, "ctx", None)
    where = f"{ctx.command_path} -h" if ctx is not None else "grpo-adv -h"
    if isinstance(exc, NoSuchOption):
        close = difflib.get_close_matches(exc.option_name, exc.possibilities or [], n=1)
        suggestion = f"did you mean {' or '.join(close)}? " if close else ""
        return OptionsError(
            f"no such option: {exc.option_name}", hint=f"{suggestion}({where} lists them)"
        )
    message = exc.format_message()  # a bad value: coercion's words (grpo_cli.cli.coercion)
    return OptionsError(message[:1].lower() + message[1:], hint=f"see {where}")


app = typer.Typer(
    cls=_Group,
    name="grpo-adv",
    help="Compute, check and explain GRPO group-relative advantages from reward logs.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"grpo-adv {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_version_callback,
            is_eager=True,
            help="Print the version.",
        ),
    ] = False,
) -> None:
    """The root options (the help is the app's ``help``: this docstring is not shown)."""


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    """Turn core errors into one line plus a hint on stderr and the documented exit code;
    a signal (KeyboardInterrupt, Terminated) into its one line. From the moment the exit
    is decided (the command returned or raised), signals change nothing
    (:mod:`grpo_cli.cli.signals`)."""
    from grpo_cli.io import interrupts

    interrupts.reset()
    command_started()
    try:
        yield
    except BaseException as exc:
        exit_decided()
        _exit_for(exc)
    exit_decided()


def _exit_for(exc: BaseException) -> NoReturn:
    """Say on stderr why a command ended with ``exc`` and exit with the documented code
    (anything but an error or a signal passes on)."""
    signum = raised_signal()
    if signum is not None and not isinstance(exc, typer.Exit):
        raise typer.Exit(_stopped(signum)) from None  # exc came of the signal (a library's wrap)
    if isinstance(exc, GrpoAdvError):
        _say(exc)
        raise typer.Exit(exc.exit_code) from None
    if isinstance(exc, KeyboardInterrupt | Terminated):  # deferred ones (io.interrupts)
        sig = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
        raise typer.Exit(_stopped(sig)) from None
    if isinstance(exc, typer.Exit) or not isinstance(exc, Exception):
        raise exc
    if isinstance(exc, OSError):
        from grpo_cli.io.write import is_broken_pipe, silence

        if is_broken_pipe(exc):
            try:  # stderr's reader gone (its console silenced it): stdout's data goes out
                sys.stdout.flush()
            except (OSError, ValueError):
                silence(sys.stdout)  # stdout's reader gone: the exit flush cannot fail then
            raise typer.Exit(EXIT_OK) from None
    _internal_error(exc)


def _stopped(signum: int) -> int:
    """Say on stderr that a signal stopped the command, and return the exit code: 130
    (Ctrl-C) or 143 (SIGTERM), nothing written; 0 when the command's outputs were already
    in place (complete), said in a warning."""
    from grpo_cli.cli.render import print_warning, stderr_console
    from grpo_cli.io import interrupts

    if interrupts.committed():
        line = stopped_line(signum, complete=True)
        print_warning(stderr_console(), line, flag_spelling)
        return EXIT_OK
    _say(GrpoAdvError(stopped_line(signum)))
    return EXIT_CODES[signal.Signals(signum)]


def _internal_error(exc: BaseException) -> NoReturn:
    """Say an exception no code of ours raised: a full disk (standard output's: a file
    write names its path) or memory short on the host (the torch engine names its device
    itself) is the user's to fix; anything else is a bug."""
    from grpo_cli.core.errors import is_disk_full, is_out_of_memory

    error: GrpoAdvError
    if is_disk_full(exc):
        error = OutputError(
            "no space left on device writing standard output",
            hint="free some space where standard output goes, or write elsewhere with -o",
        )
    elif is_out_of_memory(exc):
        error = MemoryShortError(
            "out of memory: this machine cannot hold the log and its columns in memory",
            hint="compute with "
            + option("backend", "partitioned", alias="alone")
            + " (partitions spilled to disk, about 1 GiB whatever the log's size),"
            " or on a machine with more memory",
        )
    else:
        error = GrpoAdvError(
            f"internal error: {type(exc).__name__}: {first_line(str(exc))}",
            hint="this is a bug in grpo-adv; please report it with the command you ran",
        )
    _say(error)
    raise typer.Exit(error.exit_code) from None


def _say(error: GrpoAdvError) -> None:
    """``error`` and its hint on stderr, options named by their flags."""
    from grpo_cli.cli.render import print_error, stderr_console

    print_error(stderr_console(), error, flag_spelling)


def _register(name: str, command: Callable[..., None]) -> None:
    """Add ``command`` as ``name``, run inside :func:`_user_errors`; the main help shows its
    docstring's whole first line (Click would cut it at 45 characters); its own help has
    panels and examples (:mod:`grpo_cli.cli.help`); its options' flags spell messages
    (:func:`declares_options`)."""

    @functools.wraps(declares_options(command))
    def guarded(**given: Any) -> None:
        with _user_errors():
            command(**given)

    summary = (command.__doc__ or "").strip().splitlines()[0]
    app.command(name, short_help=summary, cls=HelpCommand, epilog=epilog(name))(guarded)


for _name, _command in (
    ("compute", compute_cmd),
    ("verify", verify_cmd),
    ("summarize", summarize_cmd),
    ("plot", plot_cmd),
    ("explain", explain_cmd),
    ("presets", presets_cmd),
    ("compare", compare_cmd),
):
    _register(_name, _command)


def main() -> None:
    """The app run in this process (the console script's :mod:`grpo_cli.__main__` calls
    it), signals answered as :mod:`grpo_cli.cli.signals` says from here (a signal that
    waited while the launcher blocked them is delivered now), and the process ended
    (:func:`_exit_now`)."""
    _accept_click_completion_names()
    for sig in SIGNALS:
        signal.signal(sig, on_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)  # blocked by grpo_cli.__main__
    try:
        app()
    except SystemExit as done:
        _exit_now(done.code)


def _exit_now(code: str | int | None) -> NoReturn:
    """End the process once the command is done, without the interpreter's teardown:
    every output is written and only memory is left, which is slow to free piece by piece.
    Standard streams are flushed first (a closed pipe is not an error). With Ray still
    running in this process (its exit handlers stop an embedded cluster), or a message for
    an exit code, the interpreter exits as usual."""
    exit_decided()
    if _ray_running() or not (code is None or isinstance(code, int)):
        sys.exit(code)  # Ray's exit handlers; a message to print, as Python does
    status = code or 0
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _accept_click_completion_names() -> None:
    """Click's spelling of the completion variable (``bash_source``, ``zsh_complete``...)
    as Typer's (``source_bash``, ``complete_zsh``), so both documented forms work."""
    variable = "_GRPO_ADV_COMPLETE"
    value = os.environ.get(variable, "")
    shell, _, action = value.partition("_")
    if action in ("source", "complete") and shell in ("bash", "zsh", "fish"):
        os.environ[variable] = f"{action}_{shell}"


def _ray_running() -> bool:
    """Whether Ray is loaded and connected in this process (unsure: True)."""
    ray = sys.modules.get("ray")
    if ray is None:
        return False
    try:
        return bool(ray.is_initialized())
    except Exception:
        return True
