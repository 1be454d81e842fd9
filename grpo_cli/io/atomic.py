"""Outputs that land whole or not at all: written to a hidden temporary file beside the
target, renamed over it once complete (several outputs of a run together: see
:func:`atomic_writes`). A stream (:func:`grpo_cli.io.formats.is_stream`) is written in
place. A full disk is an output error naming the path (exit 4) and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Final

from grpo_cli.core.errors import Message, OutputError, is_disk_full
from grpo_cli.io.formats import compressed, compression_for, is_stream
from grpo_cli.io.read import FORCE, OUTPUT
from grpo_cli.io.temporaries import owner_tag


def _disk_full(path: Path) -> OutputError:
    if is_stream(path):
        return OutputError(
            f"no space left on device writing {path}",
            hint="free some space where it goes, or write elsewhere with " + OUTPUT,
        )
    return OutputError(
        f"no space left on the device of {path}; nothing was written",
        hint=f"free some space on it (df -h {path.parent}), or write elsewhere with " + OUTPUT,
    )


@contextlib.contextmanager
def _naming_a_full_disk(path: Path) -> Iterator[None]:
    """A full disk inside the block becomes an OutputError naming ``path``."""
    try:
        yield
    except Exception as exc:
        if is_disk_full(exc):
            raise _disk_full(path) from None
        raise


def _temporary(path: Path, suffix: str = ".part", *, folder: bool = False) -> Path:
    """A new empty hidden file (or folder) beside ``path``, tagged with this process."""
    prefix = f".{path.name}.{owner_tag()}."
    try:
        if folder:
            return Path(tempfile.mkdtemp(dir=path.parent, prefix=prefix, suffix=suffix))
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
    except OSError as exc:
        raise _staging_error(path, exc) from None
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def atomic_path(path: Path, *, force: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path`` (a stream: itself), put in place at ``path`` when
    the block succeeds (see :func:`atomic_writes`)."""
    with _naming_a_full_disk(path), _staged(force) as place:
        yield place(path)


def commit(staged: Sequence[tuple[Path, Path]], *, force: bool) -> None:
    """Put every staged ``(tmp, target)`` in place, all or none, as one decision a signal
    cannot split (:func:`grpo_cli.io.interrupts.deferred`). Without ``force`` each rename
    is exclusive (:func:`publish`): if a target appeared meanwhile, the targets already
    put in place are removed again."""
    from grpo_cli.io import interrupts

    mode = 0o666 & ~_umask()
    for tmp, _ in staged:
        tmp.chmod(mode)
    with interrupts.deferred():
        interrupts.check()  # the last moment to give up: nothing has landed
        landed: list[Path] = []
        try:
            for tmp, target in staged:
                publish(tmp, target, replace=force)
                landed.append(target)
        except BaseException:
            if not force:  # these are ours, made a moment ago
                for target in landed:
                    with contextlib.suppress(OSError):
                        target.unlink()
            raise
        interrupts.mark_committed()


def _appeared(path: Path) -> OutputError:
    return OutputError(
        f"{path} already exists: another run wrote it while this one ran; this run wrote nothing",
        hint="pass " + FORCE + " to overwrite it, or choose another output path",
        path=path,
    )


_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1


def _rename_noreplace(source: Path, target: Path) -> bool:
    """``rename(source, target)`` that fails (FileExistsError) if ``target`` exists (Linux
    ``renameat2``); False where it is not offered."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    done = renameat2(
        _AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE
    )
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM):
        return False  # not offered here: the fallback below
    raise OSError(code, os.strerror(code), str(target))


def publish(tmp: Path, target: Path, *, replace: bool) -> None:
    """Rename ``tmp`` (a file or a folder) to ``target``: ``replace``, atomically over what
    is there; else exclusively, an OutputError if ``target`` exists (``renameat2``, or
    else a hard link, or an exclusive claim of the name that the rename replaces)."""
    if replace:
        tmp.replace(target)
        return
    try:
        if _rename_noreplace(tmp, target):
            return
        if tmp.is_dir():
            target.mkdir()  # the claim: fails if anything has the name
            tmp.replace(target)
            return
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise
        except OSError:  # no hard links here: claim the name, then replace the claim
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            tmp.replace(target)
            return
        tmp.unlink()
    except FileExistsError:
        raise _appeared(target) from None


def check_output_folder(path: Path, *, force: bool, protected: Sequence[Path] = ()) -> None:
    """Refuse to write a folder over an input (ever), over what exists (without
    ``force``), or where its parent is missing."""
    for original in protected:
        resolved = path.resolve()
        if resolved == original.resolve() or original.resolve().is_relative_to(resolved):
            raise OutputError(
                f"refusing to overwrite the input {original}",
                hint="choose another output folder with " + OUTPUT,
            )
    check_target(path, force=force, exists=path.exists() or path.is_symlink(), verb="replace")


def check_target(
    path: Path, *, force: bool, exists: bool, verb: str = "overwrite", flag: Message = OUTPUT
) -> None:
    """Refuse to write ``path`` when it ``exists`` (without ``force``: ``flag`` names the
    option that chooses another) or its folder is missing."""
    if exists and not force:
        raise OutputError(
            f"{path} already exists",
            hint="pass " + FORCE + f" to {verb} it, or choose another " + flag,
            path=path,
        )
    if not path.parent.is_dir():
        raise OutputError(
            f"folder {path.parent} does not exist",
            hint="create it first, or choose another " + OUTPUT,
            path=path,
        )


@contextlib.contextmanager
def atomic_folder(path: Path, *, force: bool = False) -> Iterator[Path]:
    """A new hidden folder beside ``path``, renamed to ``path`` when the block succeeds
    (see :func:`commit`; with ``force``, what was there is removed once the new folder is
    in place). On any failure the folder is removed and ``path`` is left as it was."""
    from grpo_cli.io import interrupts

    tmp = _temporary(path, folder=True)
    try:
        with _naming_a_full_disk(path):
            yield tmp
            tmp.chmod(0o777 & ~_umask())
            with interrupts.deferred():
                interrupts.check()
                if force and (path.exists() or path.is_symlink()):
                    old = _temporary(path, ".old", folder=True)
                    path.replace(old / path.name)
                    tmp.replace(path)
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    publish(tmp, path, replace=False)
                interrupts.mark_committed()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _staging_error(path: Path, exc: OSError) -> OutputError:
    """Why the temporary file or folder beside ``path`` could not be made."""
    if is_disk_full(exc):
        return _disk_full(path)
    return OutputError(
        f"cannot write to {path.parent}: {exc.strerror or exc}",
        hint="check the folder's permissions, or choose another " + OUTPUT,
    )


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def atomic_write(path: Path, write: Callable[[IO[bytes]], None], *, force: bool = False) -> None:
    """:func:`atomic_writes` of one output."""
    with atomic_writes(force=force) as stage:
        stage(path, write)


Stage = Callable[[Path, Callable[[IO[bytes]], None]], None]


@contextlib.contextmanager
def atomic_writes(*, force: bool = False) -> Iterator[Stage]:
    """Several outputs that land together: ``stage(path, write)`` writes each one to its
    temporary file (compressed by its name's suffix); only when the block ends without
    error are they all put in place (:func:`commit`). If one fails (a full disk, Ctrl-C, a
    target that appeared meanwhile), no target is touched and the temporaries go."""
    with _staged(force) as place:

        def stage(path: Path, write: Callable[[IO[bytes]], None]) -> None:
            with (
                _naming_a_full_disk(path),
                place(path).open("wb") as handle,
                compressed(handle, compression_for(path)) as sink,
            ):
                write(sink)

        yield stage


@contextlib.contextmanager
def _staged(force: bool) -> Iterator[Callable[[Path], Path]]:
    """``place(target)``: a new temporary file beside ``target`` (a stream: itself), put
    in place when the block succeeds (:func:`commit`), removed when it fails."""
    staged: list[tuple[Path, Path]] = []

    def place(path: Path) -> Path:
        if is_stream(path):
            return path
        staged.append((_temporary(path), path))
        return staged[-1][0]

    try:
        yield place
        commit(staged, force=force)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise
