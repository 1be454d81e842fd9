"""Where ``--backend ray`` runs, and what it leaves: the Ray session of one run.

- **No address: a private local Ray** (``ray.init(address="local")``): neither
  ``RAY_ADDRESS`` nor the machine's last ``ray start`` is followed. Its ``RAY_TMPDIR`` is the
  command's own ``grpo-adv-ray.XXXXXXXX`` folder (in /tmp where ``$TMPDIR`` is too long for
  Ray's sockets) with an ``owner`` file, removed at the end. Every process of that Ray has
  the folder in its environment (:data:`OWNER_ENV`): a watcher process (the reaper,
  :func:`_reaper_main`) stops them and removes the folder when the command ends, however
  it ends (``kill -9`` included); the next run reaps what a killed watcher left
  (:func:`reap_leftovers`). Token authentication uses the user's token, else one made for
  the run (never written to ``~/.ray``).
- **``--ray-address auto``**: the cluster ``ray.init`` finds; **``HOST:PORT``**: that one
  (nothing listening: exit 4 at once). Ray's refusals are exit 4 with one line
  (:func:`_refused`).
- While Ray runs, standard output and error go to ``/dev/null`` (only data may reach
  standard output). A head unanswered for :data:`LOST_AFTER_S` seconds (a private Ray's
  head process gone for :data:`HEAD_GONE_S` while Ray starts) ends the run with exit 4,
  one ``error:`` line, the staging folders removed. SIGTERM keeps grpo-adv's
  handler (``ray.init`` installs its own).

This module imports only the standard library at the top (the reaper runs it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from grpo_cli.core.errors import (
    EXIT_OUTPUT,
    ClusterError,
    GrpoAdvError,
    Message,
    OptionsError,
    Verbatim,
    first_line,
    install_command,
    option,
)
from grpo_cli.io import interrupts

INSTALL_HINT: Final = install_command("ray")
OWNER_ENV: Final = "GRPO_ADV_RAY_SESSION"  # the private Ray's folder, in its processes' env
TEMP_PREFIX: Final = "grpo-adv-ray."
CONNECT_TIMEOUT_S: Final = 10.0  # a TCP probe of HOST:PORT before Ray is asked to attach
ATTACH_TIMEOUT_S: Final = 50.0  # ray.init retries an unreachable cluster for minutes
LOST_AFTER_S: Final = 10.0  # the head unreachable this long: the cluster is lost
PRIVATE_NAME: Final = "a private local Ray"  # how messages name the run's own Ray
PROBE_EVERY_S: Final = 1.0
TOKEN_FILE: Final = Path("~/.ray/auth_token")

Notes = Callable[[Message], None]
Fatal = Callable[[GrpoAdvError], None]


def import_ray() -> Any:
    """The ``ray`` module, or the one-line error with the install hint."""
    try:
        import ray
    except ImportError:
        raise OptionsError(
            option("backend", "ray") + " needs Ray, which is not installed",
            hint=f"install it with: {INSTALL_HINT}",
        ) from None
    return ray


# ------------------------------------------------------------------ the session
@dataclass
class _Where:
    """The cluster of a run: what messages call it, the ``HOST:PORT`` probed while the run
    lasts (None: not known yet), the address given to ``ray.init``, and a private Ray's
    folder (its head process is watched while Ray starts)."""

    name: str
    probe: str | None
    init_address: str
    folder: Path | None = None


@contextlib.contextmanager
def session(
    address: str | None,
    *,
    notes: Notes,
    staging: Sequence[Path],
    fatal: Fatal | None = None,
) -> Iterator[Any]:
    """Ray, attached to the cluster at ``address`` or (None) to a private local Ray
    started now and stopped at the end; ``os.environ`` restored at the end (Ray's processes
    inherit what is set; Ray sets ``RAY_AUTH_MODE``). ``staging``: the folders to remove if
    the process must end at once (its last words go to ``fatal``: :func:`_end_now`). A Ray
    the caller has already initialized is used as it is."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    with contextlib.ExitStack() as stack:
        saved = dict(os.environ)
        stack.callback(_restore_environ, saved)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if address is None:
            where = stack.enter_context(_private(notes, staging))
        else:
            where = _joined(address, notes)
        real_stderr = stack.enter_context(_silenced())
        stop = threading.Event()
        stack.callback(stop.set)
        joining = where.probe is not None
        if joining:
            _watch(where, real_stderr, staging, fatal, stop)
        _init(ray, where, real_stderr, staging, fatal)
        if not joining:
            _watch(where, real_stderr, staging, fatal, stop)
        stack.callback(ray.shutdown)
        try:
            yield ray
        except Exception:
            if where.probe and _listening(where.probe, CONNECT_TIMEOUT_S) is not None:
                raise lost(where.name) from None
            raise


def _restore_environ(saved: dict[str, str]) -> None:
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    os.environ.update(saved)


def _init(
    ray: Any,
    where: _Where,
    real_stderr: int,
    staging: Sequence[Path],
    fatal: Fatal | None,
) -> None:
    """``ray.init``, quiet; a watchdog ends the process when Ray does not answer in time
    (``ray.init`` cannot be interrupted), and a private Ray's head watched
    (:func:`_watch_head_process`). A SIGINT is deferred until it returns; a SIGTERM
    meets the handler ``ray.init`` installs (``sys.exit(15)``), whose exit is handed to
    grpo-adv's handler, which is put back. Ray's refusal is one line (:func:`_refused`)."""
    sigterm = signal.getsignal(signal.SIGTERM)
    private = where.init_address == "local"
    silent = _unreachable(where.name, f"no answer within {ATTACH_TIMEOUT_S:.0f} s", private=private)
    watchdog = threading.Timer(
        ATTACH_TIMEOUT_S, _end_now, args=(real_stderr, silent, staging, fatal)
    )
    watchdog.daemon = True
    watchdog.start()
    started = threading.Event()
    if where.folder is not None:
        _watch_head_process(where.folder, real_stderr, staging, fatal, started)
    try:
        with interrupts.deferred():  # SIGINT; ray.init replaces SIGTERM's handler
            ray.init(
                address=where.init_address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=True,
                object_store_memory=private_object_store_bytes() if private else None,
            )
    except BaseException as exc:
        with contextlib.suppress(Exception):
            ray.shutdown()
        if isinstance(exc, Exception):  # Ray's start raises plain Exception too
            raise _refused(where.name, exc, private=private) from None
        if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM and callable(sigterm):
            sigterm(signal.SIGTERM, None)  # SIGTERM met ray.init's handler: ours decides
        raise
    finally:
        watchdog.cancel()
        started.set()
        if threading.current_thread() is threading.main_thread() and sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
    if where.probe is None:
        with contextlib.suppress(Exception):
            where.probe = str(ray.get_runtime_context().gcs_address)


# ------------------------------------------------------------------ a private local Ray
STORE_SHARE: Final = 0.5  # of the machine's memory, for a private Ray's object store
MIN_STORE_BYTES: Final = 1 << 30  # below this, Ray's own default decides
CGROUP_LIMITS: Final = (
    "/sys/fs/cgroup/memory.max",  # cgroup v2
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # cgroup v1
)


def private_object_store_bytes() -> int | None:
    """:func:`object_store_bytes` of this machine (None where it does not say)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        shm = os.statvfs("/dev/shm")
    except (OSError, ValueError, AttributeError):
        return None
    return object_store_bytes(memory, _container_limit(), shm.f_bavail * shm.f_frsize)


def object_store_bytes(memory: int, limit: int | None, shm_free: int) -> int | None:
    """STORE_SHARE of the memory (or of a container's lower ``limit``; Ray's default 30%
    makes a 200M-row log spill to disk), within 90% of ``/dev/shm``'s free space (a larger
    store falls back to a slow file). None below MIN_STORE_BYTES (Docker's 64 MiB
    ``/dev/shm``): Ray's default then decides (Ray refuses a store below 75 MiB)."""
    if limit is not None:
        memory = min(memory, limit)
    store = int(min(STORE_SHARE * memory, 0.9 * shm_free))
    return store if store >= MIN_STORE_BYTES else None


def _container_limit() -> int | None:
    """The memory limit of this process's cgroup (a container's), or None."""
    for path in CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


@contextlib.contextmanager
def _private(notes: Notes, staging: Sequence[Path]) -> Iterator[_Where]:
    """A temporary folder and a reaper (which removes ``staging`` if it must end the
    process) for a private local Ray; both gone at the end."""
    reap_leftovers()
    folder = _make_folder()
    beating = threading.Event()
    reaper = _start_reaper(folder, staging, beating)
    try:
        os.environ[OWNER_ENV] = str(folder)
        os.environ["RAY_TMPDIR"] = str(folder)  # Ray's session folder: folder/ray/session_*
        token_mode = os.environ.get("RAY_AUTH_MODE", "token").lower() == "token"
        if token_mode and not _has_token():  # else Ray writes ~/.ray/auth_token
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        followed = os.environ.get("RAY_ADDRESS")
        auto = option("ray_address", Verbatim("auto"))
        aside = (
            f"RAY_ADDRESS={followed} is not followed: " + auto + " joins that cluster"
            if followed
            else auto + " joins this machine's cluster"
        )
        notes("running on a private local Ray, started for this run (" + aside + ")")
        yield _Where(PRIVATE_NAME, None, "local", folder)
    finally:
        beating.set()
        shutil.rmtree(folder, ignore_errors=True)
        if reaper is not None:
            with contextlib.suppress(OSError, ValueError):
                assert reaper.stdin is not None
                reaper.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(timeout=10)


SOCKET_PATH_MAX: Final = 107  # bytes of a Unix socket's path (AF_UNIX, Linux)
SESSIONS: Final = "ray/session_*"  # Ray's session folders in RAY_TMPDIR
# what Ray adds to its folder for its longest socket path (a 7-digit process id)
RAY_SOCKET_TAIL: Final = len("/ray/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store")
SHORT_TEMP: Final = Path("/tmp")


def _make_folder() -> Path:
    """A new folder for Ray's session, with this process's owner tag in its ``owner``
    file."""
    from grpo_cli.io.temporaries import owner_tag

    folder = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=_folder_parent()))
    (folder / "owner").write_text(owner_tag() + "\n")
    return folder


def _folder_parent() -> Path:
    """The system's temporary folder, or /tmp when that path is too long for Ray's Unix
    sockets (SOCKET_PATH_MAX: a ``$TMPDIR`` of more than about 20 characters)."""
    temp = Path(tempfile.gettempdir())
    longest = len(os.fsencode(temp)) + len(f"/{TEMP_PREFIX}12345678") + RAY_SOCKET_TAIL
    return SHORT_TEMP if longest > SOCKET_PATH_MAX and SHORT_TEMP.is_dir() else temp


def _heartbeat(reaper: subprocess.Popen[bytes], stop: threading.Event) -> None:
    """A byte to the reaper every PROBE_EVERY_S seconds until ``stop``: this process's
    interpreter runs."""
    assert reaper.stdin is not None
    while not stop.wait(PROBE_EVERY_S):
        try:
            reaper.stdin.write(b".")
            reaper.stdin.flush()
        except (OSError, ValueError):
            return


def _start_reaper(
    folder: Path, staging: Sequence[Path], beating: threading.Event
) -> subprocess.Popen[bytes] | None:
    """The reaper (:func:`_reaper_main`), on this process's standard error, and the
    heartbeats it gets until ``beating`` is set."""
    try:
        reaper = subprocess.Popen(
            [sys.executable, "-m", __name__, str(folder), *map(str, staging)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if k != OWNER_ENV},
        )
    except OSError:
        return None  # the next run reaps
    args = (reaper, beating)
    threading.Thread(target=_heartbeat, args=args, name="grpo-adv-ray-beat", daemon=True).start()
    return reaper


REAP_ROUNDS: Final = 40  # of reap's looks, 50 ms apart


def reap(folder: Path, *, spare: Sequence[int] = ()) -> None:
    """Kill every process of the private Ray of ``folder`` but ``spare`` until none is left
    (at most REAP_ROUNDS looks: Ray may start one meanwhile); then remove ``folder``."""
    for _ in range(REAP_ROUNDS):
        found = [pid for pid in _marked(folder) if pid not in spare]
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    shutil.rmtree(folder, ignore_errors=True)


def _marked(folder: Path, command: bytes | None = None) -> list[int]:
    """The processes (not this one) of the private Ray of ``folder`` (Linux: ``/proc``),
    with ``command`` only those whose command line holds it: those whose environment names
    ``folder``, and Ray's renamed ``ray::...`` processes holding a file open in it (renaming
    overwrites the memory /proc shows as their environment)."""
    marker = f"{OWNER_ENV}={folder}".encode()
    inside = f"{folder.resolve()}/"
    proc = Path("/proc")
    pids = [int(p.name) for p in proc.iterdir() if p.name.isdigit()] if proc.is_dir() else []
    found = []
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            environ = (proc / str(pid) / "environ").read_bytes()
            cmdline = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if command is not None and command not in cmdline:
            continue
        if marker in environ.split(b"\0") or (
            cmdline.startswith(b"ray::") and _holds_a_file_in(pid, inside)
        ):
            found.append(pid)
    return found


def _holds_a_file_in(pid: int, folder: str) -> bool:
    """Whether process ``pid`` has a file open under ``folder`` (a path ending in /)."""
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if str(fd.readlink()).startswith(folder):
                    return True
    return False


def reap_leftovers() -> list[Path]:
    """Reap the private Rays of this host's dead runs whose reaper died too; the folders
    removed."""
    from grpo_cli.io.temporaries import OWNER_PATTERN, alive, owner_tag

    here = OWNER_PATTERN.search(owner_tag() + ".")
    assert here is not None
    removed = []
    for folder in _folder_parent().glob(f"{TEMP_PREFIX}*"):
        try:
            match = OWNER_PATTERN.search((folder / "owner").read_text().strip() + ".")
        except OSError:
            continue
        if match is None or match["host"] != here["host"] or alive(int(match["pid"])):
            continue
        reap(folder)
        removed.append(folder)
    return removed


# ------------------------------------------------------------------ joining a cluster
def _joined(address: str, notes: Notes) -> _Where:
    """The cluster at ``address``: ``HOST:PORT`` probed (nothing listening: exit 4 at
    once, where Ray would retry for minutes); ``auto`` probed once ``ray.init`` attached."""
    if address == "auto":
        name = "this machine's Ray cluster"
        notes(f"running on {name} (" + option("ray_address", Verbatim(address)) + ")")
        return _Where(name, None, address)
    host_port(address)
    name = f"the Ray cluster at {address}"
    why = _listening(address, CONNECT_TIMEOUT_S)
    if why is not None:
        raise _unreachable(name, why)
    notes(f"running on {name}")
    return _Where(name, address, address)


def host_port(address: str) -> tuple[str, int]:
    """HOST and PORT of ``HOST:PORT``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise OptionsError(
            option("ray_address") + f" {address!r} is not HOST:PORT or auto",
            hint="give the head node's address, for example "
            + option("ray_address", Verbatim("10.0.0.1:6379")),
            value=address,
        )
    return host.strip("[]"), int(port)


def _refused(name: str, exc: BaseException, *, private: bool) -> ClusterError:
    """Ray's refusal to start or attach, in one line: a cluster asking for a token Ray was
    not told to send (``RAY_AUTH_MODE`` unset; said only in a chained exception), else the
    first sentence of Ray's message."""
    if not private and any("Authentication token is missing" in str(e) for e in chain(exc)):
        return ClusterError(
            f"cannot attach to {name}: it asks for an authentication token; nothing was written",
            hint="export RAY_AUTH_MODE=token (the token is read from RAY_AUTH_TOKEN or "
            "~/.ray/auth_token), or drop " + option("ray_address") + " to run on a "
            "private local Ray",
        )
    return _unreachable(name, _cause(str(exc)), private=private)


def _unreachable(name: str, why: str, *, private: bool = False) -> ClusterError:
    """The error of a cluster that cannot be reached, or (``private``) of a private Ray
    that does not start (a socket path too long for AF_UNIX named as the cause)."""
    if private:
        cause = (
            f"Ray's socket paths in its folder under {_folder_parent()} exceed "
            f"{SOCKET_PATH_MAX} bytes: set TMPDIR to a shorter folder"
            if "AF_UNIX path length" in why
            else "Ray could not start its processes on this machine (check its free memory "
            "and /dev/shm)"
        )
        return ClusterError(
            f"cannot start {name}: {why}; nothing was written",
            hint=cause + "; or give " + option("ray_address") + " to run on a Ray cluster "
            "already running",
        )
    return ClusterError(
        f"cannot reach {name}: {why}; nothing was written",
        hint="check the address (ray status on the head node shows it); a cluster with "
        "token authentication (ray start with RAY_AUTH_MODE=token, or a token on the head) "
        "also needs its token here (RAY_AUTH_TOKEN or ~/.ray/auth_token); or drop "
        + option("ray_address")
        + " to run on a private local Ray",
    )


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it wraps (causes, contexts, a Ray task error's ``cause``)."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack += [current.__cause__, current.__context__, getattr(current, "cause", None)]


def _listening(where: str, timeout: float) -> str | None:
    """None when something accepts a TCP connection at ``where`` (HOST:PORT); else why
    not."""
    try:
        with socket.create_connection(host_port(where), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or "no answer"


def _has_token() -> bool:
    """Whether the user has a Ray token (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``,
    ``~/.ray/auth_token``), which Ray uses as it is."""
    given = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return bool(os.environ.get("RAY_AUTH_TOKEN", "").strip()) or any(
        Path(path).expanduser().is_file() for path in (given, TOKEN_FILE) if path
    )


# ------------------------------------------------------------------ while Ray runs
@contextlib.contextmanager
def _silenced() -> Iterator[int]:
    """File descriptors 1 and 2, ``sys.stdout`` and ``sys.stderr`` on ``/dev/null`` for the
    block; yields a copy of the real standard error (for :func:`_end_now`)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with (
        Path(os.devnull).open("w") as sink,
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
    ):
        try:
            for fd in saved:
                os.dup2(sink.fileno(), fd)
            yield saved[2]
        finally:
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def _watch(
    where: _Where,
    real_stderr: int,
    staging: Sequence[Path],
    fatal: Fatal | None,
    stop: threading.Event,
) -> None:
    """A thread that probes the head every PROBE_EVERY_S seconds until ``stop`` (none
    while its address is unknown); unanswered for LOST_AFTER_S, the run ends at once."""
    probe = where.probe
    if probe is None:
        return

    def watch() -> None:
        silent_since: float | None = None
        while not stop.wait(PROBE_EVERY_S):
            if _listening(probe, PROBE_EVERY_S) is None:
                silent_since = None
                continue
            now = time.monotonic()
            silent_since = silent_since or now
            if now - silent_since >= LOST_AFTER_S and not stop.is_set():
                _end_now(real_stderr, lost(where.name), staging, fatal)

    threading.Thread(target=watch, name="grpo-adv-ray-watch", daemon=True).start()


HEAD_GONE_S: Final = 2.0  # a private Ray's head process gone this long while Ray starts


def _watch_head_process(
    folder: Path,
    real_stderr: int,
    staging: Sequence[Path],
    fatal: Fatal | None,
    started: threading.Event,
) -> None:
    """A thread that looks for the head process (GCS) of the private Ray of ``folder``
    four times a second until ``started``: seen, then gone for HEAD_GONE_S, the run ends
    at once (Ray's start would wait 30 s for the head's port, then blame the machine).
    Where Ray's start holds the interpreter, this thread cannot run: the reaper ends the
    run (:func:`_reaper_main`)."""

    def watch() -> None:
        seen, gone_since = False, None
        while not started.wait(PROBE_EVERY_S / 4):
            if _marked(folder, GCS_COMMAND):
                seen, gone_since = True, None
            elif seen:
                gone_since = gone_since or time.monotonic()
                if time.monotonic() - gone_since >= HEAD_GONE_S and not started.is_set():
                    _end_now(real_stderr, lost(PRIVATE_NAME, HEAD_GONE_S), staging, fatal)

    threading.Thread(target=watch, name="grpo-adv-ray-head", daemon=True).start()


def lost(name: str, after_s: float = LOST_AFTER_S) -> ClusterError:
    """The error of a run whose cluster's head stopped answering for ``after_s`` seconds."""
    private = name == PRIVATE_NAME
    return ClusterError(
        f"lost {name}: its head stopped answering for {after_s:.0f} s; nothing was written",
        hint="run again (its head process was killed or ran out of memory), or use the "
        "default engine"
        if private
        else "check the cluster (ray status on the head node), then run again",
    )


def _end_now(
    real_stderr: int, error: ClusterError, staging: Sequence[Path], fatal: Fatal | None
) -> None:
    """Say why on the real standard error (through ``fatal``, else plainly), remove the
    staging folders, and end the process (the main thread is inside Ray and cannot be
    interrupted); the reaper stops a private Ray."""
    with contextlib.suppress(Exception):
        os.dup2(real_stderr, 2)
        sys.stderr = sys.__stderr__ or sys.stderr
        if fatal is None:
            sys.stderr.write(f"error: {error.message}\nhint: {error.hint}\n")
        else:
            fatal(error)
        sys.stderr.flush()
    for folder in staging:
        shutil.rmtree(folder, ignore_errors=True)
    os._exit(EXIT_OUTPUT)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _cause(text: str) -> str:
    """The first sentence of Ray's message, without its colour codes."""
    return first_line(_ANSI.sub("", text), "no answer").split(". ")[0].rstrip(".")


GCS_COMMAND: Final = b"gcs_server"  # the private Ray's head
STUCK_AFTER_S: Final = 5.0  # the head gone and no heartbeat for this long


def _reaper_main(folder: str, staging: Sequence[str]) -> None:
    """The reaper: :func:`reap` once the parent ended (its standard input closed). When
    the head is gone and the parent's heartbeats stop for STUCK_AFTER_S, the parent is
    stuck in Ray's start (Ray's core would exit 1 silently 60 s later): say why on its
    standard error, remove ``staging`` and kill it (137)."""
    import select

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # Ctrl-C reaches the whole process group
    parent, path, beat = os.getppid(), Path(folder), time.monotonic()
    while True:
        if select.select([sys.stdin], [], [], PROBE_EVERY_S)[0]:
            if not os.read(sys.stdin.fileno(), 4096):
                break  # the parent ended
            beat = time.monotonic()
        started = any(path.glob(SESSIONS))  # Ray's start began: a head should run
        if started and time.monotonic() - beat >= STUCK_AFTER_S and not _marked(path, GCS_COMMAND):
            error = lost(PRIVATE_NAME, STUCK_AFTER_S)
            with contextlib.suppress(OSError):
                os.write(2, f"error: {error.message}\nhint: {error.hint}\n".encode())
            for part in staging:
                shutil.rmtree(part, ignore_errors=True)
            os.kill(parent, signal.SIGKILL)
            break
    reap(path, spare=(parent,))


if __name__ == "__main__":
    _reaper_main(sys.argv[1], sys.argv[2:])
