"""Whole jobs, as the library runs them: ``compute_advantages`` on frames, ``run_job`` on
files with any engine, and the resolution of presets and layouts they share. Imports the
core, io and the engine registry."""
