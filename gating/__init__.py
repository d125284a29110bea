"""gating/: the benchmark and the promotion gate.

A candidate checkpoint earns ``champion`` here. Layout:

- ``config.py``   GateConfig: the suite and every threshold (pydantic only).
- ``records.py``  the gate record: TaskOutcome, SuiteResult, GateResult, GateVerdict.
- ``suite.py``    run_suite: greedy answers on held-out tasks, checked and length-scored.
- ``gates.py``    the gates as pure functions, paired bootstrap CIs, load entropy.
- ``stats.py``    prompt-clustered bootstrap, exact McNemar, Clopper-Pearson, alpha spending
                  (LORD++), O'Brien-Fleming two-look boundaries.
- ``health.py``   NaN/inf weights, KL to the champion.
- ``ope.py``      SNIPS off-policy estimate on logged champion traffic.
- ``infra.py``    the candidate in a real serving replica: errors and p95.
- ``sandbox.py``  subprocess sandbox for model code; ``humaneval.py`` the HumanEval suite.
- ``gate.py``     run_gate: runs it all, records one MLflow run, tags the version, promotes.
- ``report.py``   terminal table and HTML report; ``show.py`` reads a verdict back.
- ``ui_check.py`` headless Chromium check that the MLflow UI shows the verdict.
"""
