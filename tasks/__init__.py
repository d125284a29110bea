"""Task families and suites: the toy code tasks and HumanEval, each with the checker that both the
reward and the benchmark call. Bottom floor: imports no stage and no orchestrator code.
"""
