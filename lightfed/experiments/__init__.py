"""Experiments over many runs: ``lightfed compare`` (``compare``), one module per stage: ``sweep_specs`` (the
settings tried), ``plan`` (the runs), ``execution`` (training them), ``run_logs`` (reading their logs back),
``summaries`` (the numbers), ``markdown`` and ``plot`` (the outputs) and ``collect`` (all outputs of a sweep)."""
