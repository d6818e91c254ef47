"""One script per paper table or figure: ``python -m experiments.NAME [--quick]``.

Each writes ``NAME.{csv,png,md}`` through :mod:`tensorconv.results`, into
``./tensorconv-results`` unless given ``--out`` (``--out results``: the committed
reference results).
"""
