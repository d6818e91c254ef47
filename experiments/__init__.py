"""One script per paper table or figure: ``python -m experiments.NAME [--quick]``.

Each writes ``results/NAME.{csv,png,md}`` through :mod:`tensorconv.results`.
"""
