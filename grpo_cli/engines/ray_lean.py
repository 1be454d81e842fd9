"""A private local Ray started lean: what ``ray.init(address="local")`` does at its start
that one grpo-adv run on one machine does not need is left out, and what it waits for is
waited for in short steps. On this project's 2-core machine (Ray 2.60) the start takes
about 1 s instead of 2-3 s, and the stop 0.3 s instead of 0.4-1.3 s
(``benchmarks/ray_bench.py``'s fixed cost; README "The Ray engine").

Ray's head start (``ray._private.node.Node``) runs, in order: the GCS; the autoscaler
monitor; the API server, whose address it waits for; the log monitor; the raylet, which
starts its two agents and registers with the GCS once they answer (about 0.7 s); then it
asks the GCS for the raylet until it is there. For a private Ray, :func:`lean_start`
changes, only for the ``ray.init`` it surrounds:

- **No autoscaler monitor** (``Node.start_monitor``): one machine has nothing to scale,
  and the monitor ignores SIGTERM, which held ``ray.shutdown`` for its second of grace.
- **No log monitor** (``Node.start_log_monitor``): it sends the workers' output to the
  driver, which a private Ray's driver never prints (``log_to_driver=False``).
- **No API server** (``Node.start_api_server``): with the dashboard off Ray still starts
  it, for its usage-stats module alone, and waits for it to publish its address: 0.4 s on
  the start's path, and a Python process importing Ray on a machine the start is short of
  cores on. Usage statistics are off in a private Ray unless the user turns them on
  (``RAY_USAGE_STATS_ENABLED=1``); then the API server, which reports them, is kept.
- **The raylet's registration asked for every** :data:`POLL_S` **seconds**: Ray asks the
  GCS with ``GlobalStateAccessor::GetNode``, which sleeps a whole second between two tries
  (``src/ray/gcs/gcs_client/global_state_accessor.cc``), so the start waited 1 or 2 s for
  a raylet registered after 0.7 s. :func:`wait_registered` asks first, one GCS call each
  time; Ray's own call then finds the raylet at once. A raylet still unregistered after
  REGISTER_WAIT_S (Ray's own limit) is Ray's start failing, as Ray says it; a GCS that
  cannot be asked is left to Ray's own wait.

Each change replaces one attribute of Ray's own modules for the duration of ``ray.init``
and puts it back after (also when ``ray.init`` fails), one start at a time in the process
(a lock); an attribute Ray no longer has is left alone, so a Ray whose internals moved
starts as before, only slower. A Ray this process has not started (``--ray-address``) is
never changed: it is joined as it runs.

The workers of a private Ray also import grpo-adv's task module when they start
(``preload_python_modules``, see :func:`system_config`), while the start completes, not in
their first task.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

POLL_S: Final = 0.02  # between two questions to the GCS for the raylet
REGISTER_WAIT_S: Final = 30.0  # Ray's own limit (raylet_start_wait_time_s)
_ONE_START: Final = threading.Lock()  # the changes are process-wide: one start at a time


def system_config(preload: Sequence[str]) -> dict[str, Any]:
    """The ``_system_config`` of a private Ray: its workers import the modules ``preload``
    when they start (Ray's ``preload_python_modules``; a module that fails to import is
    logged by the worker and left to the task that needs it), and its processes record no
    task events (``task_events_report_interval_ms`` 0: nobody reads a private Ray's
    timeline or task list, and the driver's last report held ``ray.shutdown`` 0.25 s).
    A new dict each call (``ray.init`` adds to the one it is given)."""
    config: dict[str, Any] = {"task_events_report_interval_ms": 0}
    if preload:
        config["preload_python_modules"] = list(preload)
    return config


Answers = Callable[[str], bool]  # whether a HOST:PORT accepts a connection now


@contextlib.contextmanager
def lean_start(ray: Any, answers: Answers) -> Iterator[list[str]]:
    """Around the ``ray.init`` of a private Ray: the changes of the module docstring
    (``answers``: whether the GCS accepts a connection, asked before the first question to
    it). Yields the names of the changes made (those Ray's internals allowed)."""
    made: list[str] = []
    with _ONE_START, contextlib.ExitStack() as stack:
        try:
            node_class = ray._private.node.Node
            services = ray._private.services
        except AttributeError:
            yield made
            return
        skipped = ["start_monitor", "start_log_monitor"]
        if os.environ.get("RAY_USAGE_STATS_ENABLED") != "1":  # the API server reports them
            skipped.append("start_api_server")
        for name in skipped:
            if _replace(stack, node_class, name, _skipped):
                made.append(name)
        original = getattr(services, "get_node", None)
        polled = _polled(original, answers) if callable(original) else None
        if polled is not None and _replace(stack, services, "get_node", polled):
            made.append("get_node")
        yield made


def _skipped(*_args: Any, **_kwargs: Any) -> None:
    """A process of Ray's head start that a private Ray goes without."""


def _replace(stack: contextlib.ExitStack, owner: Any, name: str, value: Any) -> bool:
    """``owner.name`` replaced by ``value`` until ``stack`` closes; False (nothing done)
    when ``owner`` has no such attribute."""
    original = owner.__dict__.get(name) if hasattr(owner, "__dict__") else None
    if original is None:
        return False
    setattr(owner, name, value)
    stack.callback(setattr, owner, name, original)
    return True


def _polled(
    get_node: Callable[[str, str], Any], answers: Answers, timeout: float = REGISTER_WAIT_S
) -> Callable[[str, str], Any]:
    """Ray's ``services.get_node(gcs_address, node_id)``, called once the raylet
    ``node_id`` is registered (:func:`wait_registered`); a RuntimeError when it is not
    within ``timeout``, as Ray's own raises for a node it cannot find."""

    def polled(gcs_address: str, node_id: str) -> Any:
        if wait_registered(gcs_address, node_id, answers=answers, timeout=timeout) is False:
            # Ray's loop (its own 30 s counted from before this wait) then ends the start
            # with its own error, rather than ask for another 30 s
            raise RuntimeError(f"the raylet of node {node_id} did not register in time")
        return get_node(gcs_address, node_id)

    return polled


def wait_registered(
    gcs_address: str, node_id: str, *, answers: Answers, timeout: float = REGISTER_WAIT_S
) -> bool | None:
    """Wait until the GCS at ``gcs_address`` knows the node ``node_id`` (hex), asking every
    POLL_S seconds, at most ``timeout`` seconds. True once it does; False when it does not
    in time; None when it cannot be asked: it does not ``answers`` (Ray's client would
    wait 40 s for it), or Ray's client fails (Ray's own wait then decides)."""
    if not answers(gcs_address):
        return None
    try:
        import importlib

        client = importlib.import_module("ray._raylet").GcsClient(address=gcs_address)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = client.get_all_node_info(timeout=1)
            if any(key.hex() == node_id for key in nodes):
                return True
            time.sleep(POLL_S)
    except Exception:
        return None
    return False
