"""The training corpus of the learned scorer: code-assistant follow-ups generated from templates.

``generate(n, seed)`` returns ``n`` labelled examples ``(text, prompt, response, label, intent)``
drawn combinatorially from the grammar below (openers x cores x slot fillers x closers, then
noise: lower case, dropped punctuation, a typo). Complaints (label 1) include ones without any
negation or keyword ("That took ages.", "Please be concise.", a pasted traceback); neutral and
positive follow-ups (label 0) include plain "no" / "nope" answering a clarifying question that
the answer asked, thanks, new unrelated requests, extensions of the answer, and questions that
mention errors without complaining ("Now make it raise ValueError on negatives").

This grammar is the only training data. The simulator's follow-ups (simulation/followup_texts.py)
and the hand-written held-out fixture (tests/fixtures/followups_labelled.jsonl, split
``heldout``) were written separately, in other words, so neither the demo nor the AUC test is
fitted to these strings.

Deliberately left out: any public or third-party dialogue data set.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PROMPTS = (
    "Write a Python function that reverses a linked list.",
    "How do I parse a CSV file with pandas and skip the header?",
    "Give me a regex that matches IPv4 addresses.",
    "Write a SQL query that returns the top 5 customers by revenue.",
    "Implement binary search in Java.",
    "Write a bash one-liner that counts lines in all .py files.",
    "Convert this callback code to async/await in JavaScript.",
    "Write a Rust function that sums a vector of i32.",
    "How do I read a JSON file in Go?",
    "Write a decorator that retries a function three times.",
    "Make this React component fetch data on mount.",
    "Write a Dockerfile for a Flask app.",
    "Sort a list of dicts by the 'age' key.",
    "Write a C function that checks if a string is a palindrome.",
    "How do I merge two dictionaries in Python?",
    "Write a unit test for the add function with pytest.",
    "Fix the off-by-one error in my loop.",
    "Write a TypeScript type for a user with optional email.",
    "Give me a git command to undo the last commit.",
    "Write a function that flattens a nested list.",
)
ANSWERS = (
    "def reverse(head):\n    prev = None\n    while head:\n"
    "        head.next, prev, head = prev, head, head.next\n    return prev",
    "df = pd.read_csv('data.csv', skiprows=1)",
    "^(\\d{1,3}\\.){3}\\d{1,3}$",
    "SELECT customer_id, SUM(amount) AS revenue FROM orders GROUP BY customer_id "
    "ORDER BY revenue DESC LIMIT 5;",
    "int lo = 0, hi = a.length - 1; while (lo <= hi) { int mid = (lo + hi) >>> 1; ... }",
    "find . -name '*.py' | xargs wc -l",
    "const data = await fetchData(); console.log(data);",
    "fn sum(v: &[i32]) -> i32 { v.iter().sum() }",
    "Here is the code:\n```python\nimport time\n\ndef retry(f):\n    ...\n```\n"
    "It retries three times.",
    "merged = {**a, **b}",
)
CLARIFYING = (
    "Do you want it to handle negative numbers too?",
    "Should it be recursive or iterative?",
    "Which Python version are you using?",
    "Do you need it to be thread-safe?",
    "Should I include type hints?",
    "Do you want me to add error handling?",
    "Is the input always sorted?",
    "Do you want the result as a list or a generator?",
    "Should empty strings count as palindromes?",
    "Do you need this to work on Windows as well?",
    "Would you like tests for it?",
    "Should I keep the original order?",
    "Here is a first version. Do you want me to optimise it?",
    "Can the list contain None values?",
    "Do you want to use a library like requests, or only the standard library?",
)
_EXC = (
    "TypeError",
    "ValueError",
    "KeyError",
    "IndexError",
    "AttributeError",
    "NameError",
    "ZeroDivisionError",
    "RecursionError",
    "ModuleNotFoundError",
    "UnboundLocalError",
)
_MSG = (
    "'NoneType' object is not subscriptable",
    "list index out of range",
    "name 'df' is not defined",
    "unsupported operand type(s) for +: 'int' and 'str'",
    "maximum recursion depth exceeded",
    "division by zero",
    "'dict' object has no attribute 'key'",
    "invalid literal for int() with base 10: 'abc'",
    "No module named 'pandas'",
)
_FILES = ("main.py", "app.py", "utils.py", "solution.py", "test_add.py")
_OBJ = (
    "it",
    "this",
    "that",
    "the code",
    "your code",
    "the function",
    "your answer",
    "the snippet",
    "this version",
    "the query",
    "your fix",
    "the regex",
)
_LANG = ("Python", "Rust", "Go", "TypeScript", "Java", "C++", "Kotlin", "bash")
_TOPIC = (
    "a binary heap",
    "a trie",
    "an LRU cache",
    "a CLI with argparse",
    "a REST endpoint",
    "a rate limiter",
    "a CSV exporter",
    "a config loader",
    "a thread pool",
    "a JSON schema",
    "quicksort",
    "a websocket client",
    "a markdown parser",
    "a cron job",
    "a cache decorator",
)


def _f(rng: random.Random, options: tuple[str, ...]) -> str:
    return rng.choice(options)


def _trace(rng: random.Random) -> str:
    exc, msg, f = _f(rng, _EXC), _f(rng, _MSG), _f(rng, _FILES)
    line = rng.randint(2, 240)
    kinds = (
        f'Traceback (most recent call last):\n  File "{f}", line {line}, in <module>\n'
        f"    result = solve(data)\n{exc}: {msg}",
        f"{exc}: {msg}",
        f"{f}:{line}:{rng.randint(1, 40)}: error: expected ';' before '}}' token",
        f"error[E0308]: mismatched types\n --> src/main.rs:{line}:9",
        'Exception in thread "main" java.lang.NullPointerException\n'
        f"    at Main.main(Main.java:{line})",
        f"thread 'main' panicked at 'index out of bounds', src/lib.rs:{line}:5",
        "Segmentation fault (core dumped)",
        "/usr/bin/ld: main.o: undefined reference to `solve'",
        "npm ERR! code ELIFECYCLE\nnpm ERR! errno 1",
    )
    return _f(rng, kinds)


# Complaint cores: (intent, templates). {o} object, {e} exception, {l} language, {t} trace.
COMPLAINTS: dict[str, tuple[str, ...]] = {
    "error_pasted": (
        "{t}",
        "I get this:\n{t}",
        "{t}\nwhat now?",
        "running it gives\n{t}",
        "Got this when I ran it:\n{t}",
        "{t}\n\nhelp",
    ),
    "still_failing": (
        "still failing",
        "Still the same error.",
        "same error as before",
        "I still get a {e}.",
        "It still crashes.",
        "Same problem, nothing changed.",
        "still broken after your change",
        "that fails again",
        "Same output as before, still wrong.",
        "Again the same {e}.",
        "still not working",
        "The tests still fail.",
    ),
    "wrong": (
        "That's wrong.",
        "{o} is wrong",
        "Wrong answer.",
        "This gives the wrong result.",
        "The output is incorrect.",
        "wrong, the sort order is reversed",
        "That's not right.",
        "That's not correct at all.",
        "{o} returns the wrong value for empty input",
        "Incorrect. It should return 6, not 5.",
        "nope, wrong type",
    ),
    "does_not_work": (
        "{o} doesn't work.",
        "Doesn't compile.",
        "It does not compile: missing semicolon.",
        "Your code crashes on startup.",
        "{o} fails on an empty list.",
        "won't build",
        "It throws a {e}.",
        "this isn't working",
        "The test fails.",
        "didn't work for me",
        "The {l} version fails to compile.",
        "it breaks on unicode input",
    ),
    "misunderstood": (
        "No, I meant in {l}.",
        "That's not what I asked.",
        "No, I meant the other function.",
        "You misunderstood the question.",
        "I asked for {l}, not Python.",
        "not what I wanted, I need it to be iterative",
        "You ignored the part about sorting.",
        "I said no external libraries.",
        "nope, I meant descending order",
        "Read my question again.",
    ),
    "too_long": (
        "Too long.",
        "way too verbose",
        "Just the code please.",
        "Please be concise.",
        "Can you make it shorter?",
        "Skip the explanation.",
        "tl;dr?",
        "Just give me the one-liner.",
        "I don't need a lecture, only the snippet.",
        "less prose, more code",
        "Shorter please.",
        "Keep it brief next time.",
        "That's a wall of text.",
    ),
    "too_slow": (
        "That took far too long.",
        "Why is it so slow?",
        "took ages to answer",
        "This runs way too slow on a million rows.",
        "It takes forever.",
        "Painfully slow response.",
        "That was slow.",
        "It times out on big inputs.",
    ),
    "no_keyword": (
        "Hmm, that's not it.",
        "Try again.",
        "Come on.",
        "Seriously?",
        "Ugh.",
        "This is useless.",
        "That makes no sense.",
        "You made that function up, it doesn't exist.",
        "There is no such method in pandas.",
        "Please actually read the error.",
        "Are you sure? The output looks off.",
        "That's the same code I gave you.",
        "You just repeated my code.",
        "Meh. Not helpful.",
        "Why did you change the API?",
        "You deleted half of my function!",
        "Where did the error handling go?",
        "That's worse than before.",
        "Nope.",
        "Not even close.",
    ),
}
NEUTRAL: dict[str, tuple[str, ...]] = {
    "thanks": (
        "Thanks!",
        "thank you",
        "Perfect, thanks.",
        "Great, that works.",
        "Works now, cheers.",
        "Awesome.",
        "nice, exactly what I needed",
        "ok",
        "OK thanks",
        "Got it.",
        "Cool.",
        "That did it.",
        "Brilliant, tests pass now.",
        "👍",
        "ty",
        "Makes sense, thanks.",
    ),
    "new_request": (
        "Now write {x} in {l}.",
        "Next: implement {x}.",
        "Can you write {x}?",
        "How would I build {x} in {l}?",
        "Another one: {x}.",
        "Write {x} please.",
        "Ok, now {x}.",
        "Different question: how do I profile {l} code?",
        "Switching topics: explain {x}.",
        "Give me an example of {x} in {l}.",
    ),
    "extend": (
        "Can you also add type hints?",
        "Now add docstrings.",
        "Add a test for it.",
        "Can you make it generic?",
        "Now make it raise {e} on negative input.",
        "Add logging to it.",
        "Could you add error handling for a missing file?",
        "Now port it to {l}.",
        "Make it work with async too.",
        "Add a CLI around it.",
        "Can you write a test that expects a {e}?",
        "Now add a benchmark.",
    ),
    "question": (
        "Why does this use a set?",
        "How does the second line work?",
        "What is the complexity of this?",
        "Is this thread-safe?",
        "Why not use a loop?",
        "What does {e} mean in general?",
        "Which version of {l} do I need for this?",
        "Can you explain the regex?",
        "What's the difference between this and map()?",
        "Is there a standard library function for this?",
    ),
    "no_other": (
        "No worries.",
        "No problem, next one:",
        "No more questions, thanks.",
        "No, that's all for now.",
        "Nothing else, thanks.",
        "no need, I'll do the rest",
        "Not right now, thanks.",
        "Nope, that covers it.",
        "no changes needed",
    ),
}
# Answers to a clarifying question the assistant asked (response ends with "?").
CLARIFY_ANSWERS = (
    "no",
    "No.",
    "nope",
    "nah",
    "No, positives only.",
    "No, a loop is fine.",
    "no need",
    "No thanks.",
    "no, keep it simple",
    "No, just {l}.",
    "Yes please.",
    "yes",
    "3.11",
    "Iterative.",
    "No, it's single-threaded.",
    "No, always sorted.",
    "no, the standard library only",
    "Not needed.",
    "Nope, no tests.",
    "A generator.",
    "No, drop empty strings.",
    "no, order doesn't matter",
    "No — Linux only.",
    "Sure.",
    "No, not this time.",
    "No, that's fine as is.",
)
_OPEN = ("", "", "", "Hmm, ", "Ok, ", "Hey, ", "Well, ", "So ", "Sorry but ", "Ugh, ")
_OPEN_NEUTRAL = ("", "", "", "Ok, ", "Alright, ", "Cool. ", "Great. ", "Hey, ")
_CLOSE = ("", "", "", " Can you fix it?", " Please fix.", " Try again.", " Any idea?", " :(", "!!")
_CLOSE_NEUTRAL = ("", "", "", " Thanks.", " :)", " Cheers.")


@dataclass(frozen=True)
class Example:
    """One labelled follow-up with the turn it follows."""

    text: str
    prompt: str
    response: str
    label: int
    intent: str


def _fill(rng: random.Random, template: str) -> str:
    return template.format(
        o=_f(rng, _OBJ), e=_f(rng, _EXC), l=_f(rng, _LANG), t=_trace(rng), x=_f(rng, _TOPIC)
    )


def _noise(rng: random.Random, text: str) -> str:
    r = rng.random()
    if r < 0.25:
        text = text.lower()
    elif r < 0.35:
        text = text.rstrip(".!")
    if rng.random() < 0.08 and len(text) > 6:
        i = rng.randrange(1, len(text) - 1)
        text = text[:i] + text[i + 1 :]
    return text


def _reask(rng: random.Random, prompt: str) -> str:
    edits = (
        lambda p: p,
        lambda p: p.lower(),
        lambda p: p.rstrip(".?") + " please",
        lambda p: "Again: " + p,
        lambda p: p.replace("Write", "write me"),
        lambda p: p + " " + _f(rng, ("", "It has to work.", "Properly this time.")),
    )
    return _f(rng, edits)(prompt).strip()


def _complaint(rng: random.Random, prompt: str) -> Example:
    intent = rng.choice((*COMPLAINTS, "reask"))
    response = _f(rng, ANSWERS)
    if intent == "reask":
        return Example(_reask(rng, prompt), prompt, response, 1, intent)
    core = _fill(rng, _f(rng, COMPLAINTS[intent]))
    if intent == "error_pasted":
        return Example(core, prompt, response, 1, intent)
    return Example(
        _noise(rng, _f(rng, _OPEN) + core + _f(rng, _CLOSE)), prompt, response, 1, intent
    )


def _neutral(rng: random.Random, prompt: str) -> Example:
    intent = rng.choice((*NEUTRAL, "clarify_answer", "clarify_answer"))
    if intent == "clarify_answer":
        text = _noise(rng, _fill(rng, _f(rng, CLARIFY_ANSWERS)))
        return Example(text, prompt, _f(rng, CLARIFYING), 0, intent)
    core = _fill(rng, _f(rng, NEUTRAL[intent]))
    text = _noise(rng, _f(rng, _OPEN_NEUTRAL) + core + _f(rng, _CLOSE_NEUTRAL))
    return Example(text, prompt, _f(rng, ANSWERS), 0, intent)


def generate(n: int, seed: int, p_complaint: float = 0.45) -> list[Example]:
    """``n`` examples, a share ``p_complaint`` of them complaints, reproducible from ``seed``."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = _f(rng, PROMPTS)
        make = _complaint if rng.random() < p_complaint else _neutral
        out.append(make(rng, prompt))
    return out
