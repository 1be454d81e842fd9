"""``python -m grpo_cli.cli`` runs the ``grpo-adv`` command line."""

from grpo_cli.cli import main

main()
