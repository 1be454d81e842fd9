"""Temporary names that carry their owner (``grpo-adv.<pid>@<host>``), so that a later run
removes what a killed run left without touching a live run's files; the engines' spill
folders.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Final

from grpo_cli.io.formats import is_stream

OWNER_PATTERN: Final = re.compile(r"grpo-adv\.(?P<pid>\d+)@(?P<host>[A-Za-z0-9-]+)\.")
SETTLE_S: Final = 2.0  # how long a spill folder removed after an error is watched


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "localhost"


def owner_tag() -> str:
    """``grpo-adv.<pid>@<host>``: marks this process's temporary files and folders."""
    return f"grpo-adv.{os.getpid()}@{_host()}"


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (this one, another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    return True


def remove_stale_temporaries(folder: Path) -> tuple[list[Path], int]:
    """Remove the hidden entries of ``folder`` whose owner tag names a process of this host
    that no longer exists (a run ended by ``kill -9``); return them and their size in
    bytes. A live run's, another host's and untagged ones are left alone."""
    removed: list[Path] = []
    size = 0
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed, size
    host = _host()
    for entry in entries:
        match = OWNER_PATTERN.search(entry.name)
        if not entry.name.startswith(".") or match is None or match["host"] != host:
            continue
        if alive(int(match["pid"])):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                size += sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
                shutil.rmtree(entry)
            else:
                size += entry.lstat().st_size
                entry.unlink()
        except OSError:
            continue
        removed.append(entry)
    return removed, size


def spill_parent(target: Path) -> Path:
    """Where a run's spill folder goes: beside ``target``, or the system's temporary folder
    when ``target`` is a stream (never a folder in /dev)."""
    return Path(tempfile.gettempdir()) if is_stream(target) else target.parent


def make_spill_folder(parent: Path) -> Path:
    """A new hidden folder in ``parent`` tagged with this process (see :func:`owner_tag`)."""
    return Path(tempfile.mkdtemp(prefix=f".{owner_tag()}.", suffix=".spill", dir=parent))


def remove_spill_folder(folder: Path, *, after_error: bool = False) -> None:
    """Remove ``folder``. ``after_error``: Polars' sink may still be writing into it on
    another thread (recreating it), so removal is retried until it stays gone (at most
    SETTLE_S seconds)."""
    shutil.rmtree(folder, ignore_errors=True)
    if not after_error:
        return
    import time

    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        time.sleep(0.05)  # gone, and still gone a moment later
        if not folder.exists():
            return
        shutil.rmtree(folder, ignore_errors=True)
