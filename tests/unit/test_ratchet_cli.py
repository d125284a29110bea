"""The operator's mistakes get fast, one-line answers, before any service starts."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ratchet.cli import EXIT_FAILED, EXIT_USAGE, main


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err



@pytest.fixture(autouse=True)
def _progress_records_only(caplog):
    """caplog keeps the progress logger's records only: another module's server thread may still
    be logging its retries to an unreachable registry while these tests run."""
    caplog.handler.addFilter(lambda record: record.name.startswith("ratchet.progress"))

def test_misspelt_config_key_is_refused_with_a_suggestion(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"trainer": {"stepz": 3}}))
    work = tmp_path / "work"
    code, err = _run(capsys, "cycle", "--config", str(cfg), "--workdir", str(work))
    assert code == EXIT_USAGE
    assert err == f"ratchet: error: {cfg}: unknown key 'trainer.stepz'; did you mean " \
                  "'trainer.steps'?"
    assert not work.exists(), "nothing may start before the config is accepted"


def test_out_of_range_config_value_names_the_field(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"fleet": {"replicas": 0}}))
    code, err = _run(capsys, "config", "show", "--config", str(cfg))
    assert code == EXIT_USAGE and "fleet.replicas" in err and len(err.splitlines()) == 1


def test_replay_reports_the_real_line_number(tmp_path, capsys):
    rec = tmp_path / "rec.jsonl"
    good = json.dumps({"topic": "t", "key": None, "value": "{}", "timestamp_ms": 1})
    rec.write_text("\n".join([good] * 20 + ["{oops"]) + "\n")
    code, err = _run(capsys, "replay", str(rec), "--workdir", str(tmp_path / "w"))
    assert code == EXIT_USAGE and f"{rec}:21: not valid JSON" in err
    assert not (tmp_path / "w").exists()


def test_replay_record_without_timestamp_is_refused(tmp_path, capsys):
    rec = tmp_path / "rec.jsonl"
    rec.write_text(json.dumps({"topic": "t", "value": "{}"}) + "\n")
    code, err = _run(capsys, "replay", str(rec), "--workdir", str(tmp_path / "w"))
    assert code == EXIT_USAGE and f"{rec}:1: record lacks timestamp_ms" in err


def test_missing_replay_file(tmp_path, capsys):
    code, err = _run(capsys, "replay", str(tmp_path / "nope.jsonl"))
    assert code == EXIT_USAGE and "no such recording" in err


@pytest.mark.parametrize("every", ["0s", "5", "5 hours", "10s"])
def test_bad_or_tight_every_is_refused(tmp_path, every, capsys):
    code, err = _run(capsys, "loop", "--every", every, "--workdir", str(tmp_path / "w"))
    assert code == EXIT_USAGE and "--every" in err or "duration" in err
    assert not (tmp_path / "w").exists()


def test_gates_show_against_an_unreachable_server_fails_without_retrying():
    """One health probe and out: MLflow (and its minutes of retries) is never even imported."""
    import subprocess
    import sys

    from runtime.services import free_port

    code = (f"import sys; from ratchet.cli import main; "
            f"rc = main(['gates', 'show', '3', '--tracking-uri', "
            f"'http://127.0.0.1:{free_port()}']); "
            f"assert 'mlflow' not in sys.modules; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == EXIT_FAILED, proc.stderr
    err = proc.stderr.strip()
    assert "not reachable" in err and len(err.splitlines()) == 1


def test_gates_show_reads_a_preset_whose_model_is_not_installed(monkeypatch, capsys):
    """Reviewing a recorded decision needs the preset's model name, not its weights: a preset
    whose model package is missing is read (the unreachable server is what fails)."""
    from policy import config as policy_config
    from runtime.services import free_port

    def missing(package, name):
        raise policy_config.PolicyLoadError(f"policy.package: '{package}' is not installed")

    monkeypatch.setattr(policy_config, "packaged_file", missing)
    rc = main(["gates", "show", "3", "--config", "configs/smollm2-pyfuncs.json",
               "--tracking-uri", f"http://127.0.0.1:{free_port()}"])
    err = capsys.readouterr().err
    assert rc == EXIT_FAILED and "not reachable" in err and "not installed" not in err
    # a command that runs the model still refuses up front
    rc = main(["cycle", "--config", "configs/smollm2-pyfuncs.json"])
    assert rc == EXIT_USAGE and "not installed" in capsys.readouterr().err


def test_demo_refuses_a_workdir_it_did_not_create(tmp_path, capsys):
    notes = tmp_path / "mine" / "notes.txt"
    notes.parent.mkdir()
    notes.write_text("precious")
    code, err = _run(capsys, "demo", "--workdir", str(notes.parent))
    assert code == EXIT_USAGE and "refusing to delete" in err
    assert notes.read_text() == "precious"


def test_demo_workdir_marker_allows_reuse(tmp_path):
    from ratchet.demo import MARKER, prepare_workdir

    work = tmp_path / "w"
    prepare_workdir(work)
    (work / "old-span").write_text("x")
    prepare_workdir(work)
    assert sorted(p.name for p in work.iterdir()) == [MARKER]


def test_demo_run_keeps_the_log_file_the_cli_opened(tmp_path, monkeypatch):
    """The CLI prepares the workdir, then opens WORKDIR/ratchet.log; run() must not wipe it."""
    import ratchet.runner
    from ratchet.config import RatchetConfig
    from ratchet.demo import WorkdirError, prepare_workdir, run

    class Reached(Exception):
        pass

    def services(*args, **kwargs):
        raise Reached  # stop before any service starts: the workdir is what is under test

    monkeypatch.setattr(ratchet.runner, "services", services)
    work = tmp_path / "w"
    with pytest.raises(WorkdirError):
        run(RatchetConfig(), workdir=work, cycles=1)
    prepare_workdir(work)
    (work / "ratchet.log").write_text("first line\n")
    with pytest.raises(Reached):
        run(RatchetConfig(), workdir=work, cycles=1)
    assert (work / "ratchet.log").read_text() == "first line\n"


def test_config_show_prints_the_resolved_config(capsys):
    assert main(["config", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["model_name"] == "ratchet-toy" and "trainer" in shown


def test_spans_list_without_spans_says_which_workdir_it_read(tmp_path, capsys):
    code, err = _run(capsys, "spans", "list", "--workdir", str(tmp_path))
    assert code == 0 and f"no spans in {tmp_path / 'spans'}" in err and "--workdir" in err


def test_spans_show_without_spans(tmp_path, capsys):
    code, err = _run(capsys, "spans", "show", "span-000001", "--workdir", str(tmp_path))
    assert code == EXIT_USAGE and "has no spans" in err


SUITE = str(Path(__file__).resolve().parents[2] / "tasks" / "data" / "pools_v2" / "gate.jsonl")


@pytest.mark.parametrize("argv", [("gates", "show", "2"),
                                  ("gates", "compare", "1", "2", "--suite", SUITE),
                                  ("anchor", "2", "--reason", "pin")])
def test_a_workdir_without_a_store_is_bad_input(tmp_path, capsys, argv):
    """A workdir that holds no MLflow store is the operator's mistake (exit 2), not a failure."""
    code, err = _run(capsys, *argv, "--workdir", str(tmp_path))
    assert code == EXIT_USAGE and "holds no MLflow store" in err


def test_terminal_shows_own_lines_and_real_warnings_only():
    from ratchet.console import TerminalFilter

    keep = TerminalFilter()

    def rec(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "m", None, None)

    assert keep.filter(rec("ratchet.cycle", logging.INFO))
    assert keep.filter(rec("trainer.recipe", logging.INFO))
    assert keep.filter(rec("some.library", logging.WARNING))
    assert not keep.filter(rec("some.library", logging.INFO))
    assert not keep.filter(rec("apache_beam.typehints.native_type_compatibility",
                               logging.WARNING))
    assert not keep.filter(rec("kafka.conn", logging.ERROR))
    assert not keep.filter(rec("py.warnings", logging.WARNING))
    assert TerminalFilter(verbose=True).filter(rec("kafka.conn", logging.ERROR))
    beam_via_root = rec("root", logging.WARNING)
    beam_via_root.pathname = "/venv/site-packages/apache_beam/io/gcp/bigquery.py"
    assert not keep.filter(beam_via_root)


def test_progress_without_a_terminal_logs_lines_with_time_left(caplog, monkeypatch):
    import runtime.progress
    from runtime.progress import Progress

    now = [0.0]
    monkeypatch.setattr(runtime.progress.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(runtime.progress, "QUIET_S", 20.0)  # quarters come first, not silences
    monkeypatch.setitem(runtime.progress._terminal, "last", 0.0)  # a line as the step starts
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        with Progress("warm start", total=20, unit="step", bar=False) as p:
            for i in range(20):
                now[0] = 11.0 + 2.5 * i  # quarters 12.5 s apart, past SHORT_S
                p.update()
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(",")[0] for line in lines[:3]] == [
        "warm start: 5/20 step", "warm start: 10/20 step", "warm start: 15/20 step"]
    assert all("left" in line for line in lines[:3])
    assert lines[-1].startswith("warm start: done, 20 step in")
    assert caplog.records[-1].terminal is True  # closes the lines the terminal showed
    assert len(lines) == 4


def test_quarters_close_behind_the_previous_line_are_skipped(caplog, monkeypatch):
    """A quarter reached within SHORT_S of the last line (a heartbeat, or the previous quarter)
    adds no line: at most one every 10 s, at least one every 20 s."""
    import runtime.progress
    from runtime.progress import Progress

    now = [0.0]
    monkeypatch.setattr(runtime.progress.time, "monotonic", lambda: now[0])
    monkeypatch.setitem(runtime.progress._terminal, "last", 0.0)  # a line as the step starts
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        p = Progress("training", total=40, unit="step", bar=False)
        for now[0], steps in ((21.0, 5), (25.0, 5), (40.0, 10), (44.0, 5), (70.0, 5)):
            p.update(steps)
        p.close()
    lines = [r.getMessage().split(",")[0] for r in caplog.records]
    # 21 s: 5/40 (20 s quiet); 25 s: the first quarter 4 s later, skipped; 40 s: 20/40 (a
    # quarter 19 s later); 44 s: 25/40, skipped; 70 s: 30/40 (a quarter and 26 s quiet)
    assert lines == ["training: 5/40 step", "training: 20/40 step", "training: 30/40 step"]


def test_a_step_of_seconds_prints_only_its_done_line(caplog, monkeypatch):
    import runtime.progress
    from runtime.progress import Progress

    # The terminal spoke just now (a suite that ran for minutes without a terminal line would
    # otherwise make the step's first update a due heartbeat).
    monkeypatch.setitem(runtime.progress._terminal, "last", runtime.progress.time.monotonic())
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        with Progress("gate suite", total=400, unit="task", bar=False) as p:
            for _ in range(400):
                p.update()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("gate suite: done, 400 task in")
    assert caplog.records[0].terminal is False  # the log file's, not the terminal's


def test_progress_without_a_terminal_is_never_silent_for_20_s(caplog, monkeypatch):
    """A slow step (1000 warm-start steps on a loaded machine) logs before its first quarter."""
    import runtime.progress
    from runtime.progress import Progress

    now = [0.0]
    monkeypatch.setattr(runtime.progress.time, "monotonic", lambda: now[0])
    monkeypatch.setitem(runtime.progress._terminal, "last", 0.0)  # a line as the step starts
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        p = Progress("warm start", total=1000, unit="step", bar=False)
        for now[0] in (10.0, 21.0, 22.0, 50.0):  # 4 steps, far from a quarter
            p.update()
        p.close()
    lines = [r.getMessage().split(",")[0] for r in caplog.records]
    assert lines == ["warm start: 2/1000 step", "warm start: 4/1000 step"]


def test_progress_heartbeat_speaks_while_one_step_runs_long(caplog, monkeypatch):
    """No update for longer than the quiet limit (one training step of minutes): a line anyway."""
    import time

    import runtime.progress
    from runtime.progress import Progress

    monkeypatch.setattr(runtime.progress, "QUIET_S", 0.3)
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        with Progress("train", total=10, unit="step", bar=False):
            time.sleep(2.5)  # the first step has not finished
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("train: 0/10 step") and "still working" in line for line in lines)


def test_cycle_outcome_is_readable_and_a_quarantine_fails():
    from ratchet.cycle import CycleResult
    from ratchet.runner import describe, failed

    ok = CycleResult(index=2, run_id="r", span_rows=300, champion_version=3,
                     candidate_version=4, gate_passed=True, promoted=True,
                     candidate_pass_rate=0.5, champion_pass_rate=0.4, seconds={"ingest": 1.0})
    text = describe(ok)
    assert text.startswith("cycle 2: candidate v4 vs champion v3: promoted")
    assert "CycleResult(" not in text and not failed(ok)
    bad = CycleResult(index=0, run_id="r", skipped="span span-0001 failed validation")
    assert failed(bad) and "skipped — span span-0001 failed validation" in describe(bad)
    idle = CycleResult(index=0, run_id="r", skipped="span has 0 rows < min_rows_to_train")
    assert not failed(idle)
    greedy = CycleResult(index=0, run_id="r", skipped="no trainable rows: 1095 rows, 1095 greedy")
    assert not failed(greedy)
    assert "skipped — no trainable rows: 1095 rows" in describe(greedy)




def _row(cycle: int, champion: int, candidate: int, promoted: bool, rolled_back: bool = False):
    from ratchet.demo import CycleRow

    return CycleRow(
        cycle=cycle, served_version=champion, pass_rate_live=0.4, edit_persistence=0.5,
        dissatisfied_rate=0.2, mean_latency_ms=12.0, completion_tokens=9.0, span_rows=300,
        train_rows=600,
        detector_agreement=0.875, champion_version=champion, candidate_version=candidate,
        gate_candidate=0.45, gate_champion=0.40, gate_ci_low=0.01, gate_ci_high=0.09,
        gate_tasks=400,
        outcome="rolled back" if rolled_back else ("promoted" if promoted else "rejected"),
        promoted=promoted, rolled_back=rolled_back, seconds=30.0, cycle_run_id="c",
        gate_run_id="g", train_run_id="t")


def test_demo_table_names_the_versions_it_compared():
    from ratchet.demo import LEGEND, format_table

    lines = format_table([_row(0, 1, 2, True), _row(1, 2, 3, False)]).splitlines()
    assert "gated" in lines[0] and "decision CI" in lines[0]
    assert "v2/v1" in lines[1] and "promoted" in lines[1] and "[+0.010,+0.090]" in lines[1]
    assert "v3/v2" in lines[2] and "rejected" in lines[2]
    assert " 300/600 " in lines[1]  # the span's rows / all trained on, carried rows included
    assert "detect" in lines[0] and " 0.88 " in lines[1]  # detector vs simulator agreement
    assert max(len(line) for line in lines) <= 120
    for header in lines[0].split():  # every column is in the legend printed under the table
        assert header in LEGEND or header in ("cycle", "n", "outcome", "sec", "lat_ms"), header
    import textwrap

    from ratchet.demo import LEGEND_WIDTH

    assert max(len(line) for line in lines) <= LEGEND_WIDTH
    assert len(textwrap.wrap(LEGEND, LEGEND_WIDTH)) <= 3  # the demo's 80 lines hold it


def test_make_demo_preset_decodes_each_gate_task_once_per_model():
    # the toy preset decides on greedy answers: sampled answers beside them would double the
    # gate's decode and decide nothing
    from ratchet.config import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "toy-lazy-fix.json")
    assert config.gate.primary_metric == "greedy"
    assert config.gate.suite.samples == 0 and not config.gate.champion_temperatures


def test_make_demo_holdback_replica_carries_a_stable_replicas_load():
    # the impact table compares latency across arms: equal load per replica makes it comparable
    from ratchet.config import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "toy-lazy-fix.json")
    hb, replicas = config.fleet.holdback, config.fleet.replicas
    per_stable, per_holdback = (1 - hb.share) / replicas, hb.share / hb.replicas
    assert abs(per_stable - per_holdback) < 0.01


def test_demo_cycle_report_says_which_rule_decided():
    import dataclasses

    from ratchet.demo import cycle_report

    line = "rejected: guard `count_even` dropped 5 of 7, p = 0.029 <= 0.05 (largest of 31 families)"
    row = dataclasses.replace(_row(2, 1, 3, False), gate_decision=line)
    report = cycle_report(row, 1, 5, {"train": 3.0}).splitlines()
    assert report[0].startswith("cycle 2 (2 of 5): rejected;") and report[1].strip() == line


def test_one_heartbeat_per_silence_whoever_watches(monkeypatch):
    import runtime.progress
    from runtime.progress import _claim_quiet, note_terminal_line

    now = [100.0]
    monkeypatch.setattr(runtime.progress.time, "monotonic", lambda: now[0])
    monkeypatch.setitem(runtime.progress._terminal, "last", 0.0)  # a line as the step starts
    note_terminal_line()
    now[0] = 110.0
    assert not _claim_quiet(own_last=90.0)  # the terminal showed a line 10 s ago
    now[0] = 121.0
    assert _claim_quiet(own_last=90.0)
    assert not _claim_quiet(own_last=90.0)  # a second watcher of the same silence stays quiet
    now[0] = 141.0
    assert not _claim_quiet(own_last=130.0)  # its own line 11 s ago


def test_a_stage_without_progress_is_never_silent_for_20_s(caplog, monkeypatch):
    import time as real_time

    import runtime.progress
    from runtime.progress import Heartbeat, note_terminal_line

    sleep = real_time.sleep
    now = [100.0]
    monkeypatch.setattr(runtime.progress.time, "monotonic", lambda: now[0])
    monkeypatch.setitem(runtime.progress._terminal, "last", 0.0)  # a line as the step starts
    note_terminal_line()
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        with Heartbeat("cycle 3: ingest"):
            now[0] = 115.0
            sleep(1.5)  # the thread looks once a second
            now[0] = 121.0
            sleep(1.5)
            now[0] = 130.0
            note_terminal_line()  # another step showed a line
            now[0] = 145.0
            sleep(1.5)
    assert [r.getMessage() for r in caplog.records] == ["cycle 3: ingest running, 21 s"]


def test_a_stage_heartbeat_leaves_a_silence_to_an_open_progress(caplog, monkeypatch):
    import time as real_time

    import runtime.progress
    from runtime.progress import Heartbeat, Progress, note_terminal_line

    now = [100.0]
    monkeypatch.setattr(runtime.progress.time, "monotonic", lambda: now[0])
    note_terminal_line()
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        with Heartbeat("cycle 2: train"):
            p = Progress("training", total=60, unit="step", bar=False)
            now[0] = 121.0
            real_time.sleep(1.5)
            p.close()
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["training: 0/60 step"]
    assert runtime.progress._terminal["progress"] == 0


def test_a_step_opened_late_in_a_silence_shows_no_rate_yet(caplog, monkeypatch):
    import runtime.progress
    from runtime.progress import Progress, note_terminal_line

    now = [100.0]
    monkeypatch.setattr(runtime.progress.time, "monotonic", lambda: now[0])
    note_terminal_line()
    now[0] = 125.0
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        p = Progress("gate suite (400 tasks)", total=400, unit="task", bar=False)
        now[0] = 125.001
        p.update(64)  # the terminal has been quiet 25 s: a line, but no rate from 1 ms
        p.close()
    assert [r.getMessage() for r in caplog.records] == [
        "gate suite (400 tasks): 64/400 task, just started"]


def test_a_step_started_late_in_a_silence_speaks_20_s_after_the_last_line(caplog, monkeypatch):
    """Quiet time counts from the terminal's last line, not from the step's start: a step that
    starts 16 s into a silence speaks 4 s later."""
    import time as real_time

    import runtime.progress
    from runtime.progress import Heartbeat, note_terminal_line

    now = [100.0]
    monkeypatch.setattr(runtime.progress.time, "monotonic", lambda: now[0])
    note_terminal_line()
    now[0] = 116.0
    with caplog.at_level(logging.INFO, logger="ratchet.progress"):
        with Heartbeat("cycle 1: train"):
            now[0] = 120.5
            real_time.sleep(1.5)
    assert [r.getMessage() for r in caplog.records] == ["cycle 1: train running, 4 s"]


def test_demo_cycle_report_is_one_line_and_a_row_with_the_header_once():
    from ratchet.demo import cycle_report

    seconds = {"traffic": 5.1, "ingest": 11.6, "train": 53.6, "gate": 42.6, "deploy": 0.3}
    first = cycle_report(_row(1, 1, 2, True), 0, 5, seconds).splitlines()
    later = cycle_report(_row(2, 2, 3, False), 1, 5, seconds).splitlines()
    assert first[0] == ("cycle 1 (1 of 5): promoted; traffic 5 s, ingest 12 s, train 54 s, "
                        "gate 43 s, deploy 0 s")
    assert len(first) == 3 and "gated" in first[1] and "v2/v1" in first[2]
    assert len(later) == 2 and later[0].startswith("cycle 2 (2 of 5): rejected;")
    assert "v3/v2" in later[1] and "gated" not in later[1]


def test_details_a_summary_repeats_go_to_the_log_file_only(tmp_path, capsys, routed_logs):
    from ratchet import console

    console.setup(tmp_path / "r.log")
    log = logging.getLogger("ratchet.cycle")
    log.info("stage gate took 4.0 s", extra={"terminal": False})
    log.info("cycle 1 (1 of 1): rejected")
    err = capsys.readouterr().err
    assert "cycle 1 (1 of 1): rejected" in err and "stage gate took" not in err
    import runtime.progress

    assert runtime.progress.time.monotonic() - runtime.progress._terminal["last"] < 5  # noted
    written = (tmp_path / "r.log").read_text()
    assert "stage gate took 4.0 s" in written and "cycle 1 (1 of 1)" in written


def test_demo_plot_shows_intervals_and_one_scale_for_the_rates():
    import dataclasses

    import matplotlib.pyplot as plt

    from ratchet.demo import figure

    se = {"pass_rate": 0.02, "edit_persistence": 0.03, "dissatisfied_rate": 0.01,
          "mean_completion_tokens": 0.2, "mean_latency_ms": 5.0}
    rows = [dataclasses.replace(_row(i, 1, i + 1, False), live_se=se) for i in (1, 2)]
    fig = figure(rows)
    try:
        by_title = {ax.get_title().split("\n")[0]: ax for ax in fig.axes}
        pass_ax, edit_ax, dissat_ax = (by_title["live pass rate"],
                                       by_title["live edit persistence (600 s)"],
                                       by_title["live dissatisfied follow-ups"])
        assert pass_ax.get_ylim() == edit_ax.get_ylim() == dissat_ax.get_ylim() == (0.0, 1.0)
        [bars] = [c for c in edit_ax.containers]  # one errorbar: the 95% interval
        segments = bars.lines[2][0].get_segments()
        assert [round(seg[1][1] - seg[0][1], 4) for seg in segments] == [2 * 1.96 * 0.03] * 2
        assert "load" in by_title["live mean latency (ms): follows the"].get_title()
        for ax in (pass_ax, edit_ax, dissat_ax):  # the warm start's traffic as the reference
            assert any("warm start" in t.get_text() for t in ax.get_legend().get_texts())
    finally:
        plt.close(fig)


def test_the_decision_interval_has_its_own_axis_not_the_pass_rates():
    """The decision's interval is a net share of clusters: it is drawn around 0 on its own
    panel, never as champion + interval on the pass-rate axis."""
    import matplotlib.pyplot as plt

    from ratchet.demo import figure

    fig = figure([_row(1, 1, 2, True), _row(2, 2, 3, False)])
    try:
        gate, decision = fig.axes[:2]
        assert not any(len(coll.get_segments()) for coll in gate.collections
                       if hasattr(coll, "get_segments"))
        assert decision.get_title().startswith("decision: net share of clusters better")
        spans = [seg for coll in decision.collections for seg in coll.get_segments()]
        assert sorted((s[0][1], s[1][1]) for s in spans) == [(0.01, 0.09)] * 2
        labels = [t.get_text() for t in gate.get_legend().get_texts()]
        assert "first champion" in labels
    finally:
        plt.close(fig)


def test_demo_plot_and_overview_page(tmp_path):
    from ratchet.demo import plot
    from ratchet.history import render

    png = tmp_path / "cycles.png"
    plot([_row(0, 1, 2, True), _row(1, 2, 3, False, rolled_back=True)], png)
    assert png.stat().st_size > 10_000
    page = render([{"seq": "0001", "run_id": "r", "outcome": "promoted",
                    "champion_version": "1", "candidate_version": "2",
                    "gate.candidate_pass_rate": 0.45, "gate.champion_pass_rate": 0.4,
                    "gate.ci_low": 0.01, "gate.ci_high": 0.09, "span_rows": 300.0,
                    "live.edit_persistence": 0.5, "live.dissatisfied_rate": None}], "exp<1>")
    assert "<svg" in page and "[+0.010, +0.090]" in page and "exp&lt;1&gt;" in page


@pytest.mark.parametrize("threads", [1, 2])
def test_cycle_commands_train_with_the_configured_torch_threads(tmp_path, monkeypatch, threads):
    import torch

    import ratchet.demo

    seen = []
    monkeypatch.setattr(ratchet.demo, "run", lambda *a, **k: seen.append(torch.get_num_threads())
                        or 0)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"torch_threads": threads}))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3 - threads)  # anything else
        assert main(["demo", "--config", str(cfg), "--workdir", str(tmp_path / "w")]) == 0
    finally:
        torch.set_num_threads(before)
    assert seen == [threads]


def test_only_the_demo_defaults_to_the_demo_folder():
    """`make demo` wipes .demo: a production loop must not keep its state there by default."""
    from pathlib import Path

    from ratchet.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["demo"]).workdir == Path(".demo")
    for argv in (["loop"], ["cycle"], ["serve"], ["rollout", "3"], ["ui"], ["spans", "list"],
                 ["replay", "events.jsonl"]):
        assert parser.parse_args(argv).workdir == Path(".ratchet"), argv


def test_the_plot_marks_rejections_with_their_reason(tmp_path):
    import dataclasses

    from ratchet.demo import figure, short_reason

    line = "rejected: guard `count_even` dropped 5 of 7, p = 0.029 <= 0.05"
    assert short_reason(line) == "guard `count_even` dropped…"
    assert short_reason("rejected: no evidence of a win: +0.013 [-0.006, +0.040], p") == (
        "no evidence of a win")
    rows = [_row(1, 1, 2, True), dataclasses.replace(_row(2, 2, 3, False), gate_decision=line)]
    fig = figure(rows)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "promoted" in labels and "rejected" in labels
    ticks = [t.get_text() for t in fig.axes[1].get_xticklabels()]
    assert ticks == ["1\npromoted", "2\nguard\ncount_even"]


@pytest.mark.skipif(__import__("pathlib").Path("/dev/nvidiactl").exists(),
                    reason="a GPU machine: DeepSpeed detects its accelerator")
def test_deepspeeds_accelerator_guess_stays_off_a_cpu_machines_terminal(tmp_path):
    import os
    import subprocess
    import sys

    code = ("from ratchet.console import setup; setup(None); "
            "from deepspeed.accelerator import get_accelerator; print(get_accelerator()._name)")
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "cpu"
    assert "Setting accelerator to CPU" not in out.stdout + out.stderr
