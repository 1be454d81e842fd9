"""Help that teaches: each command's options in panels, one way to show defaults, and real
examples at the end (every example is run by a test: ``tests/test_help.py``).

Imports nothing heavy: ``--help`` stays fast.
"""

from __future__ import annotations

import re
from typing import Any, Final

from typer.core import TyperCommand

# The help panels, in order: each option names its own (``panel=`` of ``cli_option``, where it is
# declared); an option without one goes under "Other".
INPUT: Final = "Input"
POLICIES: Final = "Estimator and policies"
LAYOUT: Final = "Batch and layout"
OUTPUT: Final = "Output"
ENGINE: Final = "Engine"
PANEL_ORDER: Final = (INPUT, POLICIES, LAYOUT, OUTPUT, ENGINE, "Other", "Help")

# 3 to 5 real examples per command, as its help ends: its name, then each command line and
# (indented) what it does. Paths are the repository's sample data; tests/test_help.py runs
# every line from a copy of it.
_EXAMPLES: Final = """
compute
  grpo-adv compute sample_data/rewards.parquet
      writes rewards.adv.parquet beside it
  cat sample_data/rewards.jsonl | grpo-adv compute -q > adv.jsonl
      a pipe in, a pipe out
  grpo-adv compute sample_data/rewards.csv -e rloo -o adv.csv --summary groups.md
      RLOO, with the per-group table
  grpo-adv compute sample_data/verl_dump --preset verl --replace -o verl.jsonl
      a verl rollout dump, recomputed as verl does
  grpo-adv compute sample_data/rewards.parquet --low-memory -o big.adv.parquet
      bounded memory (logs larger than memory)

verify
  grpo-adv verify sample_data/verl_dump
      which trainer wrote it: every preset that reproduces it
  grpo-adv verify sample_data/verl_dump --preset verl
      a verl rollout dump
  grpo-adv verify sample_data/trl_completions --preset trl --group-size 4 --reward-weights 1,0.5
      a TRL completions table: G and the reward weights of the run
  grpo-adv verify sample_data/openrlhf_log.jsonl --preset openrlhf-group-norm -g prompt --tol 1e-6
      an OpenRLHF log, a tighter tolerance

summarize
  grpo-adv summarize sample_data/rewards.parquet
      per-step metrics on the terminal
  grpo-adv summarize sample_data/rewards.parquet --level group -o groups.csv
      the per-group table to a file
  grpo-adv summarize sample_data/rewards.parquet -o - --output-format md -q
      a Markdown table to a pipe

plot
  grpo-adv plot sample_data/rewards.parquet
      writes rewards.report.png beside it
  grpo-adv plot sample_data/rewards.parquet -o report.pdf --preset trl
      a PDF, titled with the preset
  grpo-adv plot sample_data/rewards.parquet -o report.html
      an HTML page

explain
  grpo-adv explain sample_data/rewards.parquet --group p007
      one prompt's group
  grpo-adv explain sample_data/rewards.parquet --pick worst
      the largest advantage
  grpo-adv explain sample_data/rewards.parquet --row 0 -e rloo
      row 0's group, RLOO

compare
  grpo-adv compare sample_data/rewards.parquet --preset trl --preset verl
      TRL's and verl's conventions on one log
  grpo-adv compare sample_data/rewards.parquet -e grpo -e dr_grpo -o both.parquet
      GRPO against Dr. GRPO, every row with both columns
  grpo-adv compare sample_data/rewards.parquet --preset trl -e rloo --top 3
      the three groups where they disagree most
  grpo-adv compare sample_data/trl_completions --preset trl --preset trl-none --reward-weights 1,0.5
      a TRL log: scale_rewards group against none

presets
  grpo-adv presets
      the table
  grpo-adv presets --format json
      for scripts
  grpo-adv presets --format markdown
      for docs
"""
_BLOCKS: Final = {
    name: lines for name, _, lines in (b.partition("\n") for b in _EXAMPLES.strip().split("\n\n"))
}


def _pairs(lines: str) -> tuple[tuple[str, str], ...]:
    stripped = [line.strip() for line in lines.split("\n")]
    return tuple(zip(stripped[::2], stripped[1::2], strict=True))


EXAMPLES: Final = {name: _pairs(lines) for name, lines in _BLOCKS.items()}
"""Each command's examples: (command line, what it does)."""


def epilog(command: str) -> str | None:
    """The examples of ``command`` as a help epilog (kept verbatim: ``\\b``)."""
    lines = _BLOCKS.get(command)
    return None if lines is None else f"\b\nExamples:\n{lines}"


_DEFAULT = re.compile(r"\s*\[default: (?P<value>[^\]]*)\]")


class PlainParsing:
    """Click's parsing, with option values converted by :mod:`grpo_cli.cli.coercion` (not
    Typer's Pydantic adapters: start-up time); mixed into the group and every command."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from grpo_cli.cli.coercion import install

        install(self.get_params(ctx))  # type: ignore[attr-defined]
        result: list[str] = super().parse_args(ctx, args)  # type: ignore[misc]
        return result


class HelpCommand(PlainParsing, TyperCommand):
    """A command whose ``--help`` lists options in panels (:data:`PANEL_ORDER`), shows every
    default one way ("Default: X." in the text) and ends with its examples."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Options grouped by panel, in ``PANEL_ORDER``; arguments first."""
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            names, text = record
            if getattr(param, "param_type_name", "") == "argument":
                panel = "Arguments"
                names = names.split(" <")[0]  # not Typer's type name (<list[str]>)
            elif "--help" in param.opts:
                panel = "Help"
            else:
                panel = getattr(param, "rich_help_panel", None) or "Other"
            sections.setdefault(panel, []).append((names, _one_default(text)))
        for panel in ("Arguments", *PANEL_ORDER):
            if panel in sections:
                with formatter.section(panel):
                    formatter.write_dl(sections[panel])


def _one_default(text: str) -> str:
    """Click's ``[default: X]`` as the text's own "Default: X." form."""
    match = _DEFAULT.search(text)
    if match is None:
        return text
    text = _DEFAULT.sub("", text).rstrip()
    if "Default:" in text:
        return text
    end = "" if text.endswith(".") else "."
    return f"{text}{end} Default: {match['value']}."
