"""The grader's pieces: type-strict equality, the plain-value encoding, the test runner (in
process, with a local caller), and the harness in the sandbox (timeouts, helpers, all 164
HumanEval canonical solutions)."""

from __future__ import annotations

import math

import pytest

from tasks.grader import grade_asserts, grade_check, imported_modules
from tasks.harness import (
    AnswerError,
    NotPlain,
    decode,
    encode,
    free_names,
    prepare,
    run_spec,
    strict_eq,
)


@pytest.mark.parametrize(("out", "exp"), [
    (True, 1), (1, True), (1.0, 1), (0, False), ([1, 2], (1, 2)), ([True], [1]),
    ({1: "a"}, {True: "a"}), ({(1,)}, {(True,)}), ({"a": [1]}, {"a": [1.0]}),
    (frozenset({1}), {1}), ([[0]], [[False]]), ("1", 1), (None, 0), (b"a", "a"),
])
def test_strict_eq_tells_types_apart_at_every_depth(out, exp):
    assert out == exp or type(out) is not type(exp)  # Python's == (mostly) says equal
    assert not strict_eq(out, exp)


@pytest.mark.parametrize("value", [
    0, -(2**200), 1.5, -0.0, math.inf, "é\ud800", b"\x00", None, True, [1, (2, {3})],
    {"k": frozenset({1, 2})}, {(1, "a"): [None]}, [],
])
def test_plain_values_round_trip_exactly(value):
    back = decode(encode(value))
    assert strict_eq(back, value) or (value != value)


def test_nan_round_trips_as_nan():
    assert math.isnan(decode(encode(math.nan)))


class _Sub(int):
    pass


@pytest.mark.parametrize("value", [_Sub(1), object(), iter([1]), [1, range(3)], {"a": map(str, [])},
                                   "x" * (2 << 20)])
def test_anything_but_exact_plain_values_is_refused(value):
    with pytest.raises(NotPlain):
        encode(value)


@pytest.mark.parametrize("garbled", [
    "int", ["int"], ["int", 3], ["float", "zz"], ["list", "x"], ["object", 1], ["none", 1],
    ["dict", [[["list", []], ["none"]]]], ["set", [["list", []]]], ["bool", 1],
])
def test_garbled_encodings_are_refused(garbled):
    with pytest.raises(NotPlain):
        decode(garbled)


def test_deep_nesting_is_refused():
    node = ["none"]
    for _ in range(100):
        node = ["list", [node]]
    with pytest.raises(NotPlain):
        decode(node)


def test_free_names_are_the_answers_functions():
    assert free_names("assert f(1) == g(x)\nx = 2\nimport math\nassert h(math.pi) == len('a')") \
        == ["f", "g", "h"]


def _local(functions):
    def call(name, args, kwargs):
        try:
            return functions[name](*args, **kwargs)
        except Exception as e:
            raise AnswerError(f"{name} raised {type(e).__name__}: {e}") from None
    return call


def test_run_spec_counts_asserts_and_uses_strict_equality():
    spec = {"kind": "asserts", "tests": ["assert f(1) == 2", "assert f(2) == 3",
                                         "assert [f(0)] == [1]"]}
    right = run_spec(prepare(spec), _local({"f": lambda x: x + 1}))
    assert right["passed"] and right["ok"] == right["total"] == 3 and right["calls"] == 3
    slip = run_spec(prepare(spec), _local({"f": lambda x: float(x + 1)}))
    assert not slip["passed"] and slip["ok"] == 0 and "AssertionError" in slip["detail"]
    raising = run_spec(prepare(spec), _local({"f": lambda x: 1 // 0}))
    assert not raising["passed"] and "ZeroDivisionError" in raising["detail"]
    never_called = prepare({"kind": "asserts", "tests": ["assert 1 == 1"]})
    assert not run_spec(never_called, _local({}))["passed"]


def test_run_spec_runs_check_with_trusted_helpers_and_tolerances():
    spec = {"kind": "check", "entry_point": "root",
            "prelude": "import math\ndef square(x):\n    return x * x\n"
                       "def root(x):\n    '''stub'''\n",
            "test": "def check(candidate):\n    assert abs(square(candidate(2.0)) - 2.0) < 1e-9\n"
                    "    assert candidate(4.0) == 2.0\n"}
    assert run_spec(prepare(spec), _local({"root": math.sqrt}))["passed"]
    assert not run_spec(prepare(spec), _local({"root": lambda x: int(math.sqrt(x))}))["passed"]


def test_every_eq_is_rewritten_even_in_chains_and_comprehensions():
    spec = {"kind": "asserts", "tests": ["assert 0 < f(1) == 2 <= 2",
                                         "assert all(f(x) == x + 1 for x in range(3))",
                                         "assert (f(0) == True) is False"]}
    assert run_spec(prepare(spec), _local({"f": lambda x: x + 1}))["passed"]
    assert not run_spec(prepare(spec), _local({"f": lambda x: float(x + 1)}))["passed"]


def test_fragments_of_one_program_run_as_one_unit():
    spec = {"kind": "asserts", "tests": ["for i in range(3):", "    assert f(i) == i"]}
    assert run_spec(prepare(spec), _local({"f": lambda x: x}))["passed"]
    assert not run_spec(prepare(spec), _local({"f": lambda x: 0}))["passed"]


def test_imported_modules_are_found_in_trusted_code():
    assert imported_modules("import math, os.path\nfrom typing import List\nfrom . import x",
                            "def check(c):\n    import random\n") == [
        "math", "os.path", "random", "typing"]


def test_a_looping_answer_gets_a_timeout_verdict():
    v = grade_asserts("def f(x):\n    while True:\n        pass\n", ["assert f(1) == 1"],
                      timeout_s=1.5)
    assert not v.passed and v.status == "timeout"


def test_a_looping_import_gets_a_timeout_verdict():
    v = grade_asserts("while True:\n    pass\n", ["assert f(1) == 1"], timeout_s=1.5)
    assert not v.passed and v.status == "timeout"


def test_grade_check_in_the_sandbox_reports_each_outcome():
    prelude = "def inc(x):\n    '''x + 1'''\n"
    test = "def check(candidate):\n    for i in range(50):\n        assert candidate(i) == i + 1\n"
    ok = grade_check(prelude + "    return x + 1\n", prelude=prelude, test=test,
                     entry_point="inc", timeout_s=5)
    assert ok.passed and ok.record["calls"] == 50
    bad = grade_check(prelude + "    return x\n", prelude=prelude, test=test, entry_point="inc",
                      timeout_s=5)
    assert not bad.passed and bad.status == "failed"


@pytest.mark.slow
def test_every_humaneval_canonical_solution_passes():
    from tasks.humaneval import grade, load_problems

    problems = load_problems()
    failed = [k for k, p in problems.items()
              if not grade(p, p["canonical_solution"], timeout_s=10).passed]
    assert len(problems) == 164 and failed == []


def _in_bubblewrap(tmp_path, answer: str, tests: list[str]) -> tuple[float, object]:
    """The harness program run the way a bubblewrap box runs it: uid 65534, its own pid
    namespace (the program is pid 2), read-only root, no network."""
    import json
    import os
    import secrets
    import shutil
    import subprocess
    import sys
    import time

    from tasks.grader import program, read_verdict

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    box = tmp_path / f"box-{secrets.token_hex(4)}"
    box.mkdir()
    (box / "program.py").write_text(program(answer, 5.0))
    os.chmod(box, 0o755)
    nonce = secrets.token_hex(16)
    payload = (nonce + "\n" + json.dumps(prepare({"kind": "asserts", "tests": tests}))).encode()
    in_r, in_w = os.pipe()  # the private channel: spec in, verdict out
    out_r, out_w = os.pipe()
    os.write(in_w, payload)
    os.close(in_w)
    start = time.perf_counter()
    try:
        r = subprocess.run(
            ["bwrap", "--unshare-all", "--die-with-parent", "--uid", "65534", "--gid", "65534",
             "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
             "--ro-bind", str(box), "/tmp/box", "--chdir", "/tmp/box",
             sys.executable, "-I", "-S", "/tmp/box/program.py", str(in_r), str(out_w)],
            capture_output=True, timeout=30, pass_fds=(in_r, out_w))
    finally:
        os.close(in_r)
        os.close(out_w)
    with os.fdopen(out_r, "rb") as f:
        verdict = f.read().decode()
    if b"No permissions to create new namespace" in r.stderr or (
            r.returncode and not verdict and b"bwrap:" in r.stderr):
        pytest.skip(f"bubblewrap cannot make a box here: {r.stderr[-200:]!r}")
    return time.perf_counter() - start, read_verdict(verdict, nonce)


def test_the_harness_works_in_a_bubblewrap_box(tmp_path):
    tests = ["assert f(1) == 2", "assert f(5) == 6"]
    _, right = _in_bubblewrap(tmp_path, "def f(x):\n    return x + 1\n", tests)
    assert right.passed
    sleeper = ("import os, subprocess\nsubprocess.Popen(['sleep', '30'], start_new_session=True)\n"
               "def f(x):\n    return x\n")
    seconds, wrong = _in_bubblewrap(tmp_path, sleeper, tests)
    assert not wrong.passed and wrong.status == "failed" and seconds < 20


def test_the_sandbox_hands_the_program_its_stdin():
    from tasks.sandbox import run_sandboxed

    r = run_sandboxed("import sys\nprint(sys.stdin.read()[::-1])", stdin=b"abc")
    assert r.passed and r.stdout.strip() == "cba"
    assert run_sandboxed("import sys\nprint(repr(sys.stdin.read()))").stdout.strip() == "''"
