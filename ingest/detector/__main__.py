"""Score follow-ups from the command line: ``python -m ingest.detector TEXT [--prompt P]
[--response R]`` prints one JSON line with the score, the decision, the rules that fired and the
detector version. Deliberately left out: batch input (use ``detect`` from Python)."""

from __future__ import annotations

import argparse
import json

from ingest.detector import detect, detector_version


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ingest.detector", description=__doc__)
    ap.add_argument("text", help="The user's follow-up message.")
    ap.add_argument("--prompt", default=None, help="The prompt the answer was for.")
    ap.add_argument("--response", default=None, help="The answer the follow-up came after.")
    args = ap.parse_args(argv)
    v = detect(args.text, args.prompt, args.response)
    print(json.dumps({"score": round(v.score, 4), "dissatisfied": v.dissatisfied,
                      "rules": list(v.rules), "detector_version": detector_version()}))


if __name__ == "__main__":
    main()
