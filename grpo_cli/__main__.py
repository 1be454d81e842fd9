"""``python -m grpo_cli`` and the ``grpo-adv`` console script (``grpo_cli.__main__:main``).

SIGINT and SIGTERM are blocked from the first line until the app's own handlers are in
place (:func:`grpo_cli.cli.app.main` unblocks them): loading :mod:`grpo_cli.cli` puts back
the handlers it found once it has loaded, and a signal landing between that moment and
``main`` installing its handlers would otherwise meet the default action (SIGTERM: the
process killed without its line). A signal that arrives meanwhile waits the app's load
(a fraction of a second), then ends the process with its one line and exit code.
"""

from __future__ import annotations

import signal


def main() -> None:
    """Run the ``grpo-adv`` command line in this process."""
    from grpo_cli.io.interrupts import SIGNALS  # no Polars, no typer

    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    from grpo_cli.cli import main as run_app

    run_app()


if __name__ == "__main__":
    main()
