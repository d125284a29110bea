"""A benchmark figure names the commit of the code that ran it and the machine it ran on."""

import os
import platform
import subprocess

from bench import provenance


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_the_commit_is_head_and_says_when_tracked_files_differ_from_it(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert provenance.commit(tmp_path) == head
    (tmp_path / "result.json").write_text("{}\n")  # a run's own output is untracked
    assert provenance.commit(tmp_path) == head
    (tmp_path / "a.py").write_text("x = 2\n")
    assert provenance.commit(tmp_path) == head + "+dirty"


def test_outside_a_repository_the_commit_is_unknown(tmp_path):
    assert provenance.commit(tmp_path) == "unknown"


def test_the_machine_is_described_from_the_host():
    stamp = provenance.stamp()
    assert set(stamp) == {"date", "commit", "machine", "load1"}
    assert stamp["machine"].startswith(f"{os.cpu_count()}-core {platform.machine()}")
    assert stamp["date"].endswith(" UTC")
