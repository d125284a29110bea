"""Soak: N cycles of `ratchet loop` with traffic, poison, random SIGKILLs, a stall and a broker
restart; a ledger.

Starts the embedded broker (on a fixed port, so it can be restarted), a local MLflow server, the
toy champion and a fleet; then for each round: simulated traffic (every delayed signal sent),
client-side poison, and one cycle by a `ratchet loop --max-cycles 1` controller subprocess.

- Poison, every round: a client that was served completions sends follow-ups whose text holds
  U+2028, U+2029, U+0085 and other line-breaking characters (they must become reward rows like any
  other), random bytes as the bodies of every signals endpoint (each must be a 4xx, never a 5xx),
  and random-byte records straight onto every event topic (each must be a dead letter).
- Kills: in ``--kills`` of the rounds the controller is SIGKILLed at a random moment (uniform in
  ``--kill-window``) and started again (the rerun resumes the cycle); only kills that landed
  count.
- The stall: in round ``--stall-round`` the controller is SIGSTOPped at a random moment for longer
  than its lease, a second controller on another machine (its own workdir) runs a cycle
  meanwhile, then the first is continued: it must stop without writing (fencing,
  runtime/lease.py) and its rerun must resume cleanly.
- After round ``--restart-after`` the broker is stopped and started again on the same port.

A final controller run consumes what is left, then the ledger is checked across both workdirs:

    completions produced = reward rows trained on + rows not trained yet + dead-lettered completions
    signals produced     = signals joined into rows + late signals + dead-lettered signals

``lost`` counts produced events found nowhere, ``duplicated`` reward rows that appear more than
once across the training data of gated candidates. Prints the figures and writes
bench/results/soak.json (``cycles``, ``kills``, ``stalls``, ``events``, ``lost``, ``duplicated``,
the poison figures and details).

The broker restart and the ledger: the embedded Tansu broker is memory-only, so a restart loses
its topics, the consumer group's commits and every event not ingested yet. The soak restarts it
right after a cycle's ingest committed its span (nothing in flight is then lost); ingest sees the
group's commits gone and reads the recreated topics from offset 0 (ingest/pipeline.py). Events
produced while the broker is down are spooled by the replicas and sent after it is back; a
restart with events not yet ingested would lose them, which is what a durable broker is for.
Dead letters and late signals are counted from the span manifests, which outlive the broker.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench/ingest.py would shadow the ingest package
RESULTS = ROOT / "bench" / "results" / "soak.json"
SIGNAL_COLUMNS = ("edit_persistence_30", "edit_persistence_120", "edit_persistence_300",
                  "edit_persistence_600", "feedback_accept")


def _config(args: argparse.Namespace) -> dict:
    from simulation.simulator import SIMULATED_SKEW_S

    return {
        "model_name": "soak-toy",
        "champion": {"sft_steps": 60, "seed": 0},
        "min_rows_to_train": 8,
        "gate": {"suite": {"size": 16, "max_new_tokens": 16}},
        "trainer": {"seed": 0, "steps": 2, "batch_size": 32},
        "ingest": {"drain": True, "parse": {"max_future_skew_s": SIMULATED_SKEW_S}},
        "lock": {"ttl_s": 20.0, "wait_s": 120.0, "settle_s": 0.3},
        "simulator": {"requests_per_round": args.requests, "concurrency": 4, "seed": args.seed},
    }


def _recording_simulator(**kwargs):
    """A UserSimulator that remembers the response ids it was served (``.ids``)."""
    from simulation.simulator import UserSimulator

    class Recording(UserSimulator):
        def _judge(self, served, errors):
            self.ids.extend(s.response["id"] for s in served)
            return super()._judge(served, errors)

    sim = Recording(**kwargs)
    sim.ids = []
    return sim


def _start(argv: list[str], log: Path) -> subprocess.Popen:
    with open(log, "a") as out:
        return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})


def _finish(proc: subprocess.Popen, log: Path) -> None:
    rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"controller exited {rc}; see {log}")


def _controller(argv: list[str], log: Path, rng: random.Random, kill: bool,
                window: tuple[float, float]) -> int:
    """Run one `ratchet loop --max-cycles 1`; with ``kill``, SIGKILL it at a random moment and
    rerun until it finishes. Returns how many kills landed."""
    kills = 0
    while True:
        proc = _start(argv, log)
        if kill and kills == 0:
            try:
                proc.wait(timeout=rng.uniform(*window))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                print(f"  SIGKILLed the controller (pid {proc.pid})", flush=True)
                continue
        _finish(proc, log)
        return kills


def _stalled_controller(argv: list[str], other_argv: list[str], log: Path, rng: random.Random,
                        window: tuple[float, float], lease_s: float) -> dict:
    """SIGSTOP the controller at a random moment for longer than its lease, run a second
    controller (another machine) meanwhile, then continue the first: it must stop without writing
    (or find nothing left to write); then rerun it to finish its cycle."""
    proc = _start(argv, log)
    try:
        proc.wait(timeout=rng.uniform(*window))
        print("  the controller finished before the stall; no stall this round", flush=True)
        return {"landed": False}
    except subprocess.TimeoutExpired:
        pass
    proc.send_signal(signal.SIGSTOP)
    print(f"  SIGSTOPped the controller (pid {proc.pid}) for {lease_s + 3:.0f} s", flush=True)
    time.sleep(lease_s + 3.0)
    other = _start(other_argv, log.with_name("controller-b.log"))
    _finish(other, log.with_name("controller-b.log"))
    proc.send_signal(signal.SIGCONT)
    rc = proc.wait()
    if rc not in (0, 75):
        raise RuntimeError(f"stalled controller exited {rc}; see {log}")
    stopped = "lease on" in log.read_text() and "no longer ours" in log.read_text()
    _finish(_start(argv, log), log)  # the stalled machine's rerun resumes its cycle
    return {"landed": True, "stopped_without_writing": stopped}


def _poison(bootstrap: str, urls: list[str], api_key: str, rng: random.Random, n: int) -> dict:
    """Client-side poison (module docstring). Returns the served ids, the signals sent, and the
    counts by outcome."""
    import httpx

    from ingest.kafka_io import EventProducer
    from ingest.schema import TOPICS

    separators = ["\u2028", "\u2029", "\x85", "\x1c", "\x0b", "\r", "\x00"]
    auth = {"Authorization": f"Bearer {api_key}"}
    ids, statuses = [], Counter()
    with httpx.Client(timeout=60) as http:
        for i in range(n):
            url = urls[i % len(urls)]
            r = http.post(f"{url}/v1/completions", headers=auth,
                          json={"prompt": "# add\n2+2 = ", "max_tokens": 8})
            r.raise_for_status()
            rid = r.json()["id"]
            text = f"still the same error{rng.choice(separators)}TypeError{rng.choice(separators)}"
            f = http.post(f"{url}/v1/followups", headers=auth,
                          json={"response_id": rid, "text": text})
            if f.status_code != 202:
                raise RuntimeError(f"a follow-up with a line separator was refused: {f.text}")
            ids.append(rid)
            for path in ("/v1/followups", "/v1/feedback", "/v1/edits"):
                body = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200)))
                status = http.post(f"{url}{path}", headers={**auth, "Content-Type":
                                   "application/json"}, content=body).status_code
                statuses["5xx" if status >= 500 else "4xx" if status >= 400 else "2xx"] += 1
    raw = Counter()
    with EventProducer(bootstrap) as p:
        for topic in TOPICS.values():
            for _ in range(n):
                junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
                p.send_raw(topic, None, junk + rng.choice([b"\xc2\x85", b"\xe2\x80\xa8", b""]))
                raw[topic] += 1
        p.flush()
    return {"ids": ids, "followups": len(ids), "api": statuses, "raw": raw}


def _restart_broker(broker, workdir: Path, k: int):
    from ingest.kafka_io import ensure_topics
    from runtime.services import Broker

    port = broker.port
    broker.stop()
    time.sleep(2.0)  # replicas see the broker gone and spool
    broker = Broker.start(workdir / f"broker-{k}", port=port)
    ensure_topics(broker.bootstrap)
    print(f"  restarted the broker on port {port} (topics and commits lost)", flush=True)
    return broker


def _ledger(uri: str, model: str, spans_roots: list[Path], produced_ids: list[str],
            signals_produced: int, raw_poison: Counter) -> dict:
    """The ledger across the controllers' workdirs: span ids are per workdir, so a span is
    ``(root, span_id)`` and a candidate's spans are found through its cycle id."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from mlflow import MlflowClient

    from ingest.schema import TOPICS
    from ingest.spans import SpanStore

    stores = {root: SpanStore(root) for root in spans_roots}
    manifests = {(root, m["span_id"]): m for root, st in stores.items()
                 for m in st.manifests_list()}
    client = MlflowClient(uri, registry_uri=uri)
    gated = [v for v in client.search_model_versions(f"name = '{model}'")
             if "gate.verdict" in v.tags]

    def root_of(cycle_id: str) -> Path:
        [root] = [r for r in spans_roots if (r / "_cycles" / f"{cycle_id}.json").exists()]
        return root

    trained_spans = Counter((root_of(v.tags["ratchet.cycle_id"]), s) for v in gated
                            for s in v.tags["ratchet.span_ids"].split(","))

    def rows_of(keys):
        return [pq.read_table(root / f) for root, i in keys for f in manifests[(root, i)]["files"]]

    trained = rows_of(trained_spans)
    untrained = rows_of(k for k, m in manifests.items()
                        if m["rows"] > 0 and k not in trained_spans)
    trained_ids = Counter(r for t in trained for r in t.column("response_id").to_pylist())
    untrained_ids = {r for t in untrained for r in t.column("response_id").to_pylist()}
    dead = [d for (root, i) in manifests for d in stores[root].dead_letters(i, "dead_letters")]
    late = [d for (root, i) in manifests for d in stores[root].dead_letters(i, "late")]
    dead_completions = [d for d in dead if d.topic == TOPICS["completion"]]
    dead_ids = {_response_id(d.payload) for d in dead_completions} - {None}
    raw_dead = Counter(d.topic for d in dead if _response_id(d.payload) is None)
    joined = 0
    for t in trained + untrained:
        joined += sum(t.num_rows - t.column(c).null_count for c in SIGNAL_COLUMNS)
        followup = pc.or_(pc.is_valid(t.column("followup_text")),
                          pc.is_valid(t.column("followup_dissatisfied")))
        joined += int(pc.sum(followup).as_py() or 0)
    produced = set(produced_ids)
    found = set(trained_ids) | untrained_ids | dead_ids
    poison_dead = sum(min(raw_dead[t], n) for t, n in raw_poison.items())
    poison_on_signals = sum(min(raw_dead[t], n) for t, n in raw_poison.items()
                            if t != TOPICS["completion"])
    dead_signals = len(dead) - len(dead_completions) - poison_on_signals
    signals_accounted = joined + len(late) + dead_signals
    return {
        "poison_records_sent": sum(raw_poison.values()),
        "poison_records_dead_lettered": poison_dead,
        "completions_produced": len(produced_ids),
        "reward_rows_trained": sum(trained_ids.values()),
        "reward_rows_not_trained_yet": len(untrained_ids),
        "dead_letters": len(dead),
        "dead_letter_completions": len(dead_completions),
        "late_signals": len(late),
        "signals_produced": signals_produced,
        "signals_joined": joined,
        "signals_unaccounted": signals_produced - signals_accounted,
        "completions_lost": len(produced - found),
        "completions_unknown": len(found - produced),
        "duplicated": sum(c - 1 for c in trained_ids.values() if c > 1)
        + sum(c - 1 for c in trained_spans.values() if c > 1),
        "gated_candidates": len(gated),
        "promotions": sum(v.tags.get("ratchet.promotion", "").startswith("promoted")
                          for v in gated),
    }


def _response_id(payload: str) -> str | None:
    try:
        return json.loads(payload).get("response_id")
    except (ValueError, AttributeError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--kill-window", type=float, nargs=2, default=(8.0, 60.0),
                        metavar=("FROM_S", "TO_S"), help="a kill lands this long after the start")
    parser.add_argument("--stall-round", type=int, default=3, help="round whose controller is "
                        "SIGSTOPped past its lease (-1: none)")
    parser.add_argument("--poison", type=int, default=8, help="poison follow-ups, random-byte "
                        "signal bodies per endpoint and raw records per topic, per round")
    parser.add_argument("--restart-after", type=int, default=1, help="round after which the "
                        "broker is restarted (-1: never)")
    parser.add_argument("--requests", type=int, default=48, help="completions per round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".soak")
    args = parser.parse_args()
    from runtime.services import unwind_on_sigterm

    unwind_on_sigterm()  # SIGTERM stops what this run started, by PID
    run(args)


def run(args: argparse.Namespace) -> dict:
    import shutil

    from deploy.fleet.fleet import Fleet
    from ingest.kafka_io import ensure_topics
    from ratchet.bootstrap import ensure_champion
    from ratchet.config import RatchetConfig
    from runtime.services import Broker, MlflowServer
    from simulation.simulator import SIMULATED_SKEW_S

    t0 = time.perf_counter()
    rng = random.Random(args.seed)
    work = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg_dict = _config(args)
    (work / "config.json").write_text(json.dumps(cfg_dict))
    config = RatchetConfig.model_validate(cfg_dict)
    rounds = [k for k in range(args.cycles) if k != args.stall_round]
    kill_rounds = set(rng.sample(rounds, min(args.kills, len(rounds))))
    broker = Broker.start(work / "broker")
    server = MlflowServer.start(work / "mlflow")
    fleet = sim = None
    kills, signals, stalls = 0, 0, []
    poison_ids, api_statuses, raw_poison = [], Counter(), Counter()
    try:
        ensure_topics(broker.bootstrap)
        ensure_champion(config, tracking_uri=server.uri, workdir=work / "ctl")
        fleet = Fleet.start(n_replicas=1, tracking_uri=server.uri, model_name=config.model_name,
                            bootstrap=broker.bootstrap, workdir=work / "fleet",
                            admin_token=config.fleet.admin_token,
                            signal_max_skew_s=SIMULATED_SKEW_S)
        poison_key = fleet.create_api_key("soak-poison")
        sim = _recording_simulator(urls=fleet.urls, api_key=fleet.create_api_key("soak"),
                                   speed=600.0, seed=args.seed)

        def argv(ctl: str) -> list[str]:
            return [sys.executable, "-m", "ratchet.cli", "loop", "--config",
                    str(work / "config.json"), "--workdir", str(work / ctl), "--bootstrap",
                    broker.bootstrap, "--tracking-uri", server.uri, "--every", "60s",
                    "--max-cycles", "1"]

        log = work / "controller.log"
        for k in range(args.cycles):
            stats = sim.run_round(args.requests, concurrency=4)
            sim.drain()
            signals += stats.signals_scheduled
            poison = _poison(broker.bootstrap, fleet.urls, poison_key, rng, args.poison)
            poison_ids += poison["ids"]
            signals += poison["followups"]
            api_statuses.update(poison["api"])
            raw_poison.update(poison["raw"])
            print(f"round {k}: {stats.requests - stats.errors} completions, "
                  f"{stats.signals_scheduled} signals, poison {dict(poison['api'])} through the "
                  f"API, {sum(poison['raw'].values())} raw records", flush=True)
            if k == args.stall_round:
                stalls.append(_stalled_controller(argv("ctl"), argv("ctl-b"), log, rng,
                                                  tuple(args.kill_window), config.lock.ttl_s))
            else:
                kills += _controller(argv("ctl"), log, rng, k in kill_rounds,
                                     tuple(args.kill_window))
            if k == args.restart_after:
                broker = _restart_broker(broker, work, k)
        time.sleep(3.0)  # spooled events flushed by the replicas
        _controller(argv("ctl"), log, rng, False, (0, 0))  # consume what is left
        roots = [work / c / "spans" for c in ("ctl", "ctl-b") if (work / c / "spans").exists()]
        figures = _ledger(server.uri, config.model_name, roots, sim.ids + poison_ids, signals,
                          raw_poison)
        sim.drain()
        figures["signals_send_failed"] = len(sim._scheduler.failed)
    finally:
        if sim is not None:
            sim.close()
        if fleet is not None:
            fleet.stop()
        broker.stop()
        server.stop()
    events = figures["completions_produced"] + figures["signals_produced"]
    lost = figures["completions_lost"] + max(0, figures["signals_unaccounted"])
    result = {"cycles": args.cycles, "kills": kills,
              "stalls": sum(s["landed"] for s in stalls), "stall_details": stalls,
              "events": events, "lost": lost, "duplicated": figures["duplicated"],
              "broker_restarts": int(args.restart_after >= 0),
              "poison_api_responses": dict(api_statuses), "seed": args.seed,
              "date": time.strftime("%Y-%m-%d"), "load_avg_1m_at_end": os.getloadavg()[0],
              "seconds": round(time.perf_counter() - t0, 1), **figures}
    print(json.dumps(result, indent=1))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
