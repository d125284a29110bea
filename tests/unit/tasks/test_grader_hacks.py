"""Answers that try to pass without computing the right values, each graded by the real grader on
real tasks (a pyfuncs task and a JSONL suite line, run in the sandbox): every one is refused, an
honest correct answer still passes and an honest wrong one still fails."""

from __future__ import annotations

import json
import os

import pytest

from tasks.grader import read_verdict
from tasks.humaneval import grade as grade_humaneval
from tasks.humaneval import load_problems
from tasks.jsonl_suite import grade as grade_jsonl
from tasks.jsonl_suite import parse_line
from tasks.pyfuncs import BY_FAMILY, instances
from tasks.pyfuncs import grade as grade_pyfunc

TIMEOUT_S = 5.0
ADD = instances(BY_FAMILY["add_const"], 1, seed=0)[0]  # e.g. add_52(x): x plus 52
K = int(ADD.prompt.split(" plus ")[1].split(".")[0])
N = ADD.entry_point
RIGHT = f"def {N}(x):\n    return x + {K}\n"
WRONG = f"def {N}(x):\n    return x\n"


def _passes(code: str) -> bool:
    return grade_pyfunc(ADD, f"```python\n{code}\n```", timeout_s=TIMEOUT_S).passed


def test_an_honest_answer_passes_and_an_honest_wrong_one_fails():
    assert _passes(RIGHT)
    wrong = grade_pyfunc(ADD, WRONG, timeout_s=TIMEOUT_S)
    assert not wrong.passed and "AssertionError" in wrong.detail


EXIT_HACKS = {
    "raise SystemExit": "raise SystemExit",
    "sys.exit(0)": "import sys\nsys.exit(0)",
    "os._exit(0)": "import os\nos._exit(0)",
    # exit()/quit() are site's builtins: absent under -S, so take them from where site does
    "exit() and quit()": "try:\n    exit()\nexcept NameError:\n    import _sitebuiltins\n"
                         "    _sitebuiltins.Quitter('quit', 'Ctrl-D')()",
    "exit in the function": "import sys\n" + WRONG.replace("return x", "sys.exit(0)"),
    "atexit exits 0": "import atexit, os\natexit.register(os._exit, 0)",
    "excepthook exits 0": "import os, sys\nsys.excepthook = lambda *a: os._exit(0)",
}


@pytest.mark.parametrize("hack", list(EXIT_HACKS))
def test_a_wrong_function_that_exits_early_fails(hack):
    assert not _passes(WRONG + EXIT_HACKS[hack])


ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__

def {n}(x):
    return Anything()
"""
INT_SUBCLASS = """
class Sly(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

def {n}(x):
    return Sly(0)
"""


@pytest.mark.parametrize("code", [ALWAYS_EQUAL, INT_SUBCLASS], ids=["always-equal", "int-subclass"])
def test_objects_that_equal_everything_fail(code):
    r = grade_pyfunc(ADD, code.format(n=N), timeout_s=TIMEOUT_S)
    assert not r.passed and "not a plain value" in r.detail


def test_true_where_1_is_expected_fails_and_1_where_true_is_expected_fails():
    record = {"task_id": "jsonl/count_positive/0001", "prompt": "count positives",
              "entry_point": "count_positive",
              "tests": ["assert count_positive([3]) == 1", "assert count_positive([-1]) == 0",
                        "assert count_positive([5]) == 1"]}
    task = parse_line(json.dumps(record))
    as_bool = "def count_positive(xs):\n    return xs[0] > 0\n"
    honest = "def count_positive(xs):\n    return sum(1 for x in xs if x > 0)\n"
    assert not grade_jsonl(task, as_bool, timeout_s=TIMEOUT_S).passed
    assert grade_jsonl(task, honest, timeout_s=TIMEOUT_S).passed
    multiple = instances(BY_FAMILY["is_multiple"], 1, seed=0)[0]  # expects True / False
    k = int(multiple.prompt.split("divisible by ")[1].split(" ")[0])
    name = multiple.entry_point
    as_int = f"def {name}(n):\n    return int(n % {k} == 0)\n"
    assert not grade_pyfunc(multiple, as_int, timeout_s=TIMEOUT_S).passed
    assert grade_pyfunc(multiple, f"def {name}(n):\n    return n % {k} == 0\n",
                        timeout_s=TIMEOUT_S).passed


PATCHES = {
    "AssertionError": "import builtins\nclass Quiet(Exception):\n    pass\n"
                      "builtins.AssertionError = Quiet",
    "__build_class__": "import builtins\nbuiltins.__build_class__ = lambda *a, **k: None",
    "print": "import builtins\nbuiltins.print = lambda *a, **k: None",
    # a tracer that reads the expected value off the caller's assert line
    "settrace peeks at the assert": """
import sys
_peek = [None]
try:
    _lines = open(__file__).read().splitlines()
except NameError:
    _lines = []
def _spy(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "NAME" and frame.f_back is not None:
        line = _lines[frame.f_back.f_lineno - 1] if frame.f_back.f_lineno <= len(_lines) else ""
        if "==" in line:
            _peek[0] = eval(line.split("==", 1)[1])
    return None
sys.settrace(_spy)
def NAME(x):
    return _peek[0]
""".replace("NAME", N),
    "sys.modules": "import sys, types\nfake = types.ModuleType('json')\n"
                   "fake.dumps = lambda *a, **k: '{\"passed\": true, \"ok\": 9, \"total\": 9}'\n"
                   "sys.modules['json'] = fake\nimport os\nsys.modules['os'] = None\n"
                   "sys.excepthook = lambda *a: os._exit(0)",
}


@pytest.mark.parametrize("patch", list(PATCHES))
def test_patched_builtins_tracers_and_modules_do_not_reach_the_verdict(patch):
    assert not _passes(WRONG + PATCHES[patch])


def test_a_printed_verdict_line_is_not_a_verdict():
    fake = json.dumps({"passed": True, "ok": 5, "total": 5, "calls": 5, "detail": ""})
    guessed = "0" * 32
    code = WRONG + (
        f"import os, sys\nprint({guessed!r} + ' ' + {fake!r}, flush=True)\n"
        f"print('0123456789abcdef' * 2, {fake!r}, flush=True)\n"
        f"os.write(1, ({guessed!r} + ' ' + {fake!r} + '\\n').encode())\n"
        "sys.exit(0)\n")
    assert not _passes(code)


def test_reading_stdin_or_the_parent_finds_no_nonce():
    fake = json.dumps({"passed": True, "ok": 5, "total": 5, "calls": 5, "detail": ""})
    code = WRONG + f"""
import os, sys
found = []
for source in ("/dev/stdin", f"/proc/{{os.getppid()}}/fd/0", f"/proc/{{os.getppid()}}/environ"):
    try:
        with open(source, "rb") as f:
            found.append(f.read(4096).decode(errors="replace"))
    except OSError:
        pass
try:
    found.append(sys.stdin.read())
except (OSError, ValueError):
    pass
try:
    with open(f"/proc/{{os.getppid()}}/mem", "rb") as f:
        found.append("mem")
except OSError:
    pass
for text in found:
    for word in text.split():
        print(word, {fake!r}, flush=True)
sys.exit(0)
"""
    assert not _passes(code)


def test_writing_files_does_not_fake_a_verdict():
    fake = json.dumps({"passed": True, "ok": 5, "total": 5, "calls": 5, "detail": ""})
    code = WRONG + f"""
import os
for path in ("program.py", "/proc/self/fd/1"):
    try:
        with open(path, "w") as f:
            f.write("0" * 32 + " " + {fake!r} + "\\n")
    except OSError:
        pass
os._exit(0)
"""
    assert not _passes(code)


def test_killing_the_parent_fails():
    # the grading process itself is spared: only the process that runs the answer's code has
    # this pid as its parent when the grader runs the answer directly (old style)
    code = WRONG + (f"import os, signal\nif os.getppid() != {os.getpid()}:\n"
                    "    try:\n        os.kill(os.getppid(), signal.SIGKILL)\n"
                    "    except OSError:\n        pass\nos._exit(0)\n")
    r = grade_pyfunc(ADD, code, timeout_s=TIMEOUT_S)
    assert not r.passed


def test_a_fork_that_outlives_the_answer_is_killed_and_the_wrong_answer_fails():
    code = WRONG + ("import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                    "    time.sleep(60)\n    os._exit(0)\nraise SystemExit\n")
    r = grade_pyfunc(ADD, code, timeout_s=TIMEOUT_S)
    assert not r.passed and not r.detail.startswith("timeout")


def test_the_verdict_reader_needs_exactly_one_well_formed_line_with_the_nonce():
    nonce = "ab" * 16
    good = {"passed": True, "ok": 3, "total": 3, "calls": 3, "detail": ""}
    line = f"{nonce} {json.dumps(good)}"
    assert read_verdict(line + "\n", nonce).passed
    assert not read_verdict("", nonce).passed
    assert not read_verdict(f"{line}\n{line}\n", nonce).passed
    assert not read_verdict(line.replace(nonce, "cd" * 16), nonce).passed
    assert not read_verdict(f"{nonce} {{not json", nonce).passed
    assert not read_verdict(f"x{line}", nonce).passed
    for bad in ({**good, "ok": 2}, {**good, "passed": 1}, {**good, "total": 0, "ok": 0},
                {**good, "passed": False}):
        assert not read_verdict(f"{nonce} {json.dumps(bad)}", nonce).passed


@pytest.fixture(scope="module")
def he0():
    return load_problems()["HumanEval/0"]


@pytest.mark.parametrize("body", [
    "    return False\nimport sys\nsys.exit(0)\n",
    "    class A:\n        def __eq__(s, o):\n            return True\n    return A()\n",
    "ints",  # the right algorithm answering 1/0 where True/False are expected
])
def test_humaneval_hacks_fail(he0, body):
    if body == "ints":
        body = he0["canonical_solution"].replace("return True", "return 1").replace(
            "return False", "return 0")
    signature = he0["prompt"].split('"""')[0].rstrip()
    r = grade_humaneval(he0, f"{signature}\n{body}", timeout_s=TIMEOUT_S, chat=True)
    assert not r.passed
    fair = grade_humaneval(he0, f"{signature}\n{he0['canonical_solution']}",
                           timeout_s=TIMEOUT_S, chat=True)
    assert fair.passed
