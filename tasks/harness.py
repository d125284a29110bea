"""The grading harness: the program the sandbox runs for every code checker (tasks/grader.py).

This file is shipped into the sandbox as source text (stdlib only; no ``from __future__``, since
the sandbox puts its own prelude first) followed by one line, ``_main(ANSWER, DEADLINE_S)``.
It is also importable, so the same comparison code is unit-tested in-process.

Two processes, forked first thing:

- the **child** closes the private channel (tasks/sandbox.py) and stdin, leaves stdout (its fd 1
  becomes stderr), moves to its own process
  group, drops every capability when it runs as root, and only then runs the answer's code inside
  ``try/except BaseException``. It then serves calls: ``(name, args, kwargs)`` in, the answer's
  return value out, encoded by :func:`encode` (exact plain types only: an int subclass, an
  always-equal object, a generator is an error, not a value).
- the **parent** never runs answer code. It makes itself non-dumpable (the child cannot read its
  memory or file descriptors through /proc or ptrace) and a child subreaper, reads the run's nonce
  and the test spec from the channel only after the fork (so neither is in the child's memory), and
  runs the trusted test code itself with the answer's functions bound to proxies that call into
  the child. Every ``==`` in that test code is :func:`strict_eq`. Then it kills the child and
  everything it spawned and writes ONE line, ``<nonce> <json record>``, to the channel. Never
  stdin or stdout: the box's pid 1 holds those, and any process of the box may open them.

Specs (made ready by :func:`prepare` outside the box, so the harness never imports ``ast``; JSON
on the channel after the nonce line):

- ``{"kind": "asserts", "tests": [...]}``: assert statements run one by one in one namespace; a
  free name (not a builtin, not bound by the tests) is a function of the answer.
- ``{"kind": "check", "prelude": ..., "test": ..., "entry_point": ...}``: HumanEval style. The
  trusted prelude (the problem's prompt: imports and helpers such as ``poly``) runs in the
  parent, then the test code, then ``check(candidate)`` with ``candidate`` (and the entry point's
  name) a proxy.

Deliberately left out: answers whose functions take or return objects other than plain values
(classes, callables, iterators) -- such a value is an error, so such tasks cannot be graded here.
"""

import builtins
import json
import os
import select
import signal
import sys
import time

MAX_DEPTH = 64
MAX_ITEMS = 200_000
MAX_STR = 1 << 20
MAX_MESSAGE = 16 << 20
MAX_DETAIL = 400
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
CAPABILITY_VERSION_3 = 0x20080522


class NotPlain(Exception):
    """A value outside the plain types (or over the size bounds); never crosses the pipe."""


class AnswerError(Exception):
    """The answer's function raised (the test code may catch this, as it would the original)."""


class AnswerGone(BaseException):
    """The answer's process died, timed out or spoke garbage: the run fails whatever the tests
    catch (a BaseException, so ``except Exception`` in test code cannot swallow it)."""


# ---------------------------------------------------------------------------------------------
# Plain values: a tagged JSON encoding of exact types, bounded in depth and size


def encode(value):
    """``value`` as tagged JSON; raises NotPlain for anything but exact plain types."""
    budget = [MAX_ITEMS]

    def enc(x, depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH:
            raise NotPlain("value too large or too deeply nested")
        t = type(x)
        if x is None:
            return ["none"]
        if t is bool:
            return ["bool", x is True]
        if t is int:
            return ["int", hex(x)]
        if t is float:
            return ["float", float.hex(x)]
        if t is str:
            if len(x) > MAX_STR:
                raise NotPlain("string too long")
            return ["str", x]
        if t is bytes:
            if len(x) > MAX_STR:
                raise NotPlain("bytes too long")
            return ["bytes", bytes.hex(x)]
        if t is list or t is tuple or t is set or t is frozenset:
            return [t.__name__, [enc(e, depth + 1) for e in x]]
        if t is dict:
            return ["dict", [[enc(k, depth + 1), enc(v, depth + 1)] for k, v in dict.items(x)]]
        raise NotPlain(f"{t.__name__} is not a plain value")

    return enc(value, 0)


def decode(tagged):
    """The inverse of :func:`encode`, validating every node; raises NotPlain on anything else."""
    budget = [MAX_ITEMS]

    def dec(node, depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH:
            raise NotPlain("value too large or too deeply nested")
        if type(node) is not list or not node or type(node[0]) is not str:
            raise NotPlain("garbled value")
        tag, rest = node[0], node[1:]
        if tag == "none" and not rest:
            return None
        if len(rest) != 1:
            raise NotPlain("garbled value")
        v = rest[0]
        try:
            if tag == "bool" and type(v) is bool:
                return v
            if tag == "int" and type(v) is str:
                return int(v, 16)
            if tag == "float" and type(v) is str:
                return float.fromhex(v)
            if tag == "str" and type(v) is str and len(v) <= MAX_STR:
                return v
            if tag == "bytes" and type(v) is str:
                return bytes.fromhex(v)
            if tag in ("list", "tuple", "set", "frozenset") and type(v) is list:
                items = [dec(e, depth + 1) for e in v]
                return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](
                    items)
            if tag == "dict" and type(v) is list:
                out = {}
                for pair in v:
                    if type(pair) is not list or len(pair) != 2:
                        raise NotPlain("garbled dict")
                    out[dec(pair[0], depth + 1)] = dec(pair[1], depth + 1)
                return out
        except (ValueError, TypeError, OverflowError) as e:  # bad hex, unhashable key
            raise NotPlain(f"garbled {tag}: {type(e).__name__}") from None
        raise NotPlain(f"garbled value (tag {tag!r})")

    return dec(tagged, 0)


_PLAIN = (type(None), bool, int, float, str, bytes, list, tuple, dict, set, frozenset)


def _key(x):
    """A hashable key that tells 1, 1.0 and True apart, at every depth (for sets, dict keys)."""
    t = type(x)
    if t is tuple:
        return ("tuple", tuple(_key(e) for e in x))
    if t is frozenset:
        return ("frozenset", frozenset(_key(e) for e in x))
    return (t.__name__, x)


def strict_eq(out, exp):
    """``type(out) is type(exp) and out == exp``, recursively through containers."""
    t = type(out)
    if t is not type(exp):
        return False
    if t not in _PLAIN:  # trusted parent-side values of other types: their own equality
        return bool(out == exp)
    if t is list or t is tuple:
        return len(out) == len(exp) and all(strict_eq(a, b) for a, b in zip(out, exp))
    if t is dict:
        if len(out) != len(exp):
            return False
        keys = {_key(k): k for k in exp}
        for k, v in out.items():
            if _key(k) not in keys or not strict_eq(v, exp[keys[_key(k)]]):
                return False
        return True
    if t is set or t is frozenset:
        return {_key(e) for e in out} == {_key(e) for e in exp}
    return out == exp


def strict_source(source):
    """``source`` with every ``a == b`` (also inside chains ``a == b < c``) rewritten to
    ``__strict_eq__(a, b)``. Runs where the tests are prepared, outside the box (see
    :func:`prepare`), so the harness itself never imports ``ast``."""
    import ast

    class StrictEq(ast.NodeTransformer):
        def visit_Compare(self, node):
            self.generic_visit(node)
            if not any(isinstance(op, ast.Eq) for op in node.ops):
                return node
            parts = []
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, ast.Eq):
                    parts.append(ast.Call(ast.Name("__strict_eq__", ast.Load()), [left, right],
                                          []))
                else:
                    parts.append(ast.Compare(left, [op], [right]))
                left = right
            return parts[0] if len(parts) == 1 else ast.BoolOp(ast.And(), parts)

    return ast.unparse(ast.fix_missing_locations(StrictEq().visit(ast.parse(source))))


def free_names(source):
    """Names the code reads but never binds and that are not builtins: the answer's."""
    import ast

    tree = ast.parse(source)
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return sorted(loaded - bound - set(dir(builtins)))


def prepare(spec):
    """A spec made ready to run: test units as ``[text, strict source]``, the answer's names the
    tests call, and (``check``) the trusted prelude and the entry point."""
    if spec["kind"] == "asserts":
        units = list(spec["tests"])
        try:
            for t in units:
                compile(t, "<test>", "exec")
        except SyntaxError:  # fragments of one program: run them as one unit
            units = ["\n".join(units)]
        names = free_names("\n".join(units))
        return {"units": [[u, strict_source(u)] for u in units], "names": names,
                "prelude": "", "entry_point": None}
    if spec["kind"] == "check":
        unit = spec["test"] + "\n\ncheck(__candidate__)\n"
        return {"units": [[spec["test"], strict_source(unit)]], "names": [],
                "prelude": spec["prelude"], "entry_point": spec["entry_point"]}
    raise ValueError(f"unknown spec kind {spec['kind']!r}")


def describe(e):
    """``Type: message`` of an exception, bounded, never raising."""
    try:
        text = f"{type(e).__name__}: {e}"
    except BaseException:
        text = "unprintable exception"
    return text[:MAX_DETAIL]


# ---------------------------------------------------------------------------------------------
# Running the tests against a caller (a proxy into the child, or any function in tests)


class Proxy:
    """Stands for one of the answer's functions in the trusted test code."""

    def __init__(self, call, name):
        self._call, self._name = call, name

    def __call__(self, *args, **kwargs):
        return self._call(self._name, args, kwargs)

    def __repr__(self):
        return f"<answer function {self._name}>"


def run_spec(prepared, call):
    """Run a prepared spec's trusted tests (:func:`prepare`), calling the answer through
    ``call(name, args, kwargs)``.

    Returns the record: ``passed`` iff every test ran without error, at least one call reached
    the answer and the answer's process stayed sound; ``ok``/``total`` count the tests."""
    calls = [0]

    def counted(name, args, kwargs):
        calls[0] += 1
        return call(name, args, kwargs)

    ns = {"__builtins__": builtins, "__name__": "__tests__", "__strict_eq__": strict_eq}
    for name in prepared["names"]:
        ns[name] = Proxy(counted, name)
    if prepared["entry_point"] is not None:
        exec(compile(prepared["prelude"], "<prelude>", "exec"), ns)  # trusted helpers and stubs
        proxy = Proxy(counted, prepared["entry_point"])
        ns[prepared["entry_point"]] = ns["__candidate__"] = proxy
    units = prepared["units"]
    ok, detail = 0, ""
    for i, (text, source) in enumerate(units):
        where = f"(on test {i}: {text.strip()[:120]})"
        try:
            exec(compile(source, f"<test {i}>", "exec"), ns)
            ok += 1
        except AnswerGone as e:
            detail = detail or f"{describe(e)} {where}"
            break
        except BaseException as e:  # AssertionError, the answer's own error, anything else
            detail = detail or f"{describe(e).rstrip(': ')} {where}"
    passed = ok == len(units) and calls[0] > 0
    if ok == len(units) and not calls[0]:
        detail = "the tests never called the answer"
    return {"passed": passed, "ok": ok, "total": len(units), "calls": calls[0],
            "detail": detail[:MAX_DETAIL]}


# ---------------------------------------------------------------------------------------------
# The two processes


def _send(fd, obj):
    data = json.dumps(obj).encode()
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd, n, deadline):
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AnswerGone("timeout: the answer did not reply in time")
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv(fd, deadline):
    head = _read_exactly(fd, 4, deadline)
    if head is None:
        return None
    n = int.from_bytes(head, "big")
    if n > MAX_MESSAGE:
        raise AnswerGone(f"the answer's process sent {n} bytes")
    body = _read_exactly(fd, n, deadline)
    if body is None:
        return None
    return json.loads(body)


def _child(answer, req_r, res_w):
    """Runs the answer, then serves calls until the parent closes the pipe."""
    ns = {"__name__": "__answer__", "__builtins__": builtins}
    try:
        exec(compile(answer, "<answer>", "exec"), ns)
        status = None
    except BaseException as e:
        status = describe(e)
    try:
        _send(res_w, ["ready", status])
    except BaseException:
        os._exit(0)
    while True:
        try:
            msg = _recv(req_r, None)
        except BaseException:
            break
        if msg is None:
            break
        try:
            name, args, kwargs = msg
            fn = ns.get(name)
            if fn is None:
                raise NameError(f"name {name!r} is not defined by the answer"
                                + (f" (its code raised {status})" if status else ""))
            out = fn(*decode(args), **decode(kwargs))
            reply = ["ok", encode(out)]
        except BaseException as e:
            reply = ["error", describe(e)]
        try:
            _send(res_w, reply)
        except BaseException:
            break
    os._exit(0)


class _Channel:
    """The parent's end: one call at a time, bounded by the run's deadline."""

    def __init__(self, req_w, res_r, deadline):
        self.req_w, self.res_r, self.deadline = req_w, res_r, deadline
        self.ready = False
        self.gone = None

    def _get(self):
        try:
            msg = _recv(self.res_r, self.deadline)
        except AnswerGone as e:
            self.gone = str(e)
            raise
        except Exception as e:  # bad JSON, nesting too deep for the parser, a broken pipe
            self.gone = f"the answer's process sent garbage ({type(e).__name__})"
            raise AnswerGone(self.gone) from None
        if msg is None:
            self.gone = "the answer's process ended before replying"
            raise AnswerGone(self.gone)
        if type(msg) is not list or len(msg) != 2:
            self.gone = "the answer's process sent garbage"
            raise AnswerGone(self.gone)
        return msg

    def call(self, name, args, kwargs):
        if self.gone:
            raise AnswerGone(self.gone)
        if not self.ready:
            tag, status = self._get()
            if tag != "ready":
                self.gone = "the answer's process sent garbage"
                raise AnswerGone(self.gone)
            self.ready = True
        try:
            request = [name, encode(list(args)), encode(dict(kwargs))]
        except NotPlain as e:
            raise AnswerError(f"argument of {name} is not a plain value: {e}") from None
        try:
            _send(self.req_w, request)
        except OSError:
            self.gone = "the answer's process ended before replying"
            raise AnswerGone(self.gone) from None
        tag, value = self._get()
        if tag == "error" and type(value) is str:
            raise AnswerError(f"{name} raised {value}")
        if tag != "ok":
            self.gone = "the answer's process sent garbage"
            raise AnswerGone(self.gone)
        try:
            return decode(value)
        except NotPlain as e:
            self.gone = f"the answer's process sent garbage ({e})"
            raise AnswerGone(self.gone) from None


def _prctl(libc, option, value):
    if libc is not None:
        libc.prctl(option, value, 0, 0, 0)


def _reap_all(pid):
    """SIGKILL the child's group and every process left under this one (a subreaper: orphans
    of the answer's processes are our children); in a fresh pid namespace, everything else."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except OSError:
            pass
    if os.getpid() <= 2:  # pid 1 or 2 only inside a pid namespace of our own (bubblewrap)
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    stop = time.monotonic() + 2.0
    while time.monotonic() < stop:
        try:
            done, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no child left: nothing the answer started is alive
        if done:
            continue
        for other in _children():  # live ones that left the group: find and kill them
            try:
                os.kill(other, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.001)


def _children():
    me, out = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for d in entries:
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _drop_capabilities(libc):
    """Leave the child no capability (now or after an exec): with CAP_SYS_PTRACE, a root child
    could read the non-dumpable parent through /proc. Needs libc when running as root."""
    if os.geteuid() != 0:
        return
    if libc is None:
        raise OSError("cannot drop root's capabilities without libc")
    import ctypes

    for cap in range(64):  # the bounding set: nothing can be regained by exec
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (two words each) = 0
    if libc.capset(header, data) != 0 or libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError("capset failed")


def _main(answer, deadline_s, preload=()):
    """The sandboxed program's entry point (see the module docstring). ``preload``: the modules
    the trusted tests import, imported before the fork (no file is read after it)."""
    deadline = time.monotonic() + deadline_s
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        libc = None
    for name in preload:
        try:
            __import__(name)
        except BaseException:
            pass
    _prctl(libc, PR_SET_DUMPABLE, 0)
    _prctl(libc, PR_SET_CHILD_SUBREAPER, 1)
    # The private channel (tasks/sandbox.py): the nonce and the spec come in on one descriptor,
    # the verdict goes out on the other; stdio is open to every process of the box.
    chan_in, chan_out = (int(a) for a in sys.argv[1:3])
    req_r, req_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(chan_in)
            os.close(chan_out)
            os.close(0)
            os.open(os.devnull, os.O_RDONLY)  # fd 0 again, now empty
            os.dup2(2, 1)  # the answer's prints go to stderr: stdout is the parent's alone
            sys.stdout = sys.stderr  # (line-buffered: a killed child's prints are not lost)
            os.close(req_w)
            os.close(res_r)
            os.setpgid(0, 0)
            _prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL)
            _drop_capabilities(libc)
        except BaseException:
            os._exit(70)
        _child(answer, req_r, res_w)
        os._exit(0)
    os.close(req_r)
    os.close(res_w)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    raw = _read_all(chan_in)  # only now: the nonce and the tests were never in the child
    os.close(chan_in)
    nonce, _, spec_text = raw.partition(b"\n")
    channel = _Channel(req_w, res_r, deadline)
    try:
        record = run_spec(json.loads(spec_text), channel.call)
        if channel.gone:
            record["passed"] = False
            record["detail"] = (record["detail"] or channel.gone)[:MAX_DETAIL]
    except BaseException as e:
        record = {"passed": False, "ok": 0, "total": 0, "calls": 0,
                  "detail": f"harness error: {describe(e)}"}
    record["timeout"] = bool(channel.gone and channel.gone.startswith("timeout"))
    _reap_all(pid)
    if nonce:
        line = nonce + b" " + json.dumps(record).encode() + b"\n"
        while line:
            line = line[os.write(chan_out, line):]
    os._exit(0)


def _read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
