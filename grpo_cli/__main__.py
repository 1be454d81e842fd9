"""``python -m grpo_cli`` runs the ``grpo-adv`` command line."""

from grpo_cli.cli import main

main()
