"""What the commands other than ``compute`` report: ``summarize``, ``verify``, ``explain``,
``compare`` and ``plot``. Imports jobs and below, never the CLI (no Rich, no Typer)."""
