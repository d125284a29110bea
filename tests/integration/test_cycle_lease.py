"""The per-model lease and compare-and-set promotion against a real MLflow server."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.integration


def test_second_holder_is_refused_with_a_clear_message_until_release(mlflow_server):
    from runtime.lease import LeaseHeld, LeaseLost, ModelLease

    name = f"lease-{uuid.uuid4().hex[:8]}"
    first = ModelLease(mlflow_server.uri, name, ttl_s=30, settle_s=0.2)
    second = ModelLease(mlflow_server.uri, name, ttl_s=30, wait_s=1.0, settle_s=0.2, poll_s=0.2)
    with first:
        with pytest.raises(LeaseHeld, match="locked by another cycle") as e:
            second.acquire()
        assert first.owner in str(e.value)
        first.check()  # still ours
    assert first.read() is None  # released
    with second:
        with pytest.raises(LeaseLost):
            first.check()


def test_two_contenders_that_both_saw_it_free_never_both_hold_it(mlflow_server):
    """Both read the lease free and the same fence; the slower one's writes land after the
    faster one has verified. Read-verify alone let both hold token 1; the token is claimed."""
    import threading

    from runtime.lease import LeaseHeld, ModelLease

    both_read = threading.Barrier(2, timeout=30)

    class Contender(ModelLease):
        def __init__(self, *args, delay_s: float, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.delay_s, self.first = delay_s, True

        def fence(self) -> int:
            value = super().fence()
            if self.first:  # both saw the lease free and read this fence before either wrote
                self.first = False
                both_read.wait()
                time.sleep(self.delay_s)
            return value

    name = f"lease-{uuid.uuid4().hex[:8]}"
    fast = Contender(mlflow_server.uri, name, ttl_s=30, settle_s=0.3, delay_s=0.0)
    slow = Contender(mlflow_server.uri, name, ttl_s=30, settle_s=0.3, wait_s=1.0, poll_s=0.2,
                     delay_s=1.0)
    fast._ensure_model()
    outcome: dict[str, object] = {}

    def contend(lease: ModelLease) -> None:
        try:
            lease.acquire()
            time.sleep(1.5)  # the slower one has written and verified by now
            outcome[lease.owner] = lease._why_lost() or "held"
        except LeaseHeld as e:
            outcome[lease.owner] = e

    threads = [threading.Thread(target=contend, args=(x,)) for x in (fast, slow)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        held = [o for o, v in outcome.items() if v == "held"]
        assert held == [fast.owner], outcome
        assert isinstance(outcome[slow.owner], LeaseHeld)
    finally:
        fast.release()
        slow.release()


def test_lease_is_renewed_while_held_and_expires_when_not(mlflow_server):
    from runtime.lease import ModelLease

    name = f"lease-{uuid.uuid4().hex[:8]}"
    lease = ModelLease(mlflow_server.uri, name, ttl_s=3.0, settle_s=0.1)
    with lease:
        first_expiry = lease.read()["expires"]
        time.sleep(2.5)
        assert lease.read()["expires"] > first_expiry  # the thread renewed it
    # A holder that stops renewing (as if dead on another host) loses it after the TTL.
    stale = ModelLease(mlflow_server.uri, name, ttl_s=3.0, owner="elsewhere:1:x")
    stale._ensure_model()
    stale._write()
    waiter = ModelLease(mlflow_server.uri, name, ttl_s=30, wait_s=10, settle_s=0.1, poll_s=0.5)
    start = time.monotonic()
    with waiter:
        assert 1.0 < time.monotonic() - start < 10


def test_dead_holder_on_this_host_is_not_waited_for(mlflow_server):
    from runtime.lease import ModelLease

    name = f"lease-{uuid.uuid4().hex[:8]}"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    import socket

    holder = ModelLease(mlflow_server.uri, name, ttl_s=3600,
                        owner=f"{socket.gethostname()}:{dead.stdout.strip()}:x")
    holder._ensure_model()
    holder._write()
    with ModelLease(mlflow_server.uri, name, ttl_s=30, wait_s=0, settle_s=0.1) as lease:
        assert lease.read()["owner"] == lease.owner


def test_promotion_is_compare_and_set(mlflow_server, tmp_path):
    import mlflow

    from runtime import registry

    name = f"cas-{uuid.uuid4().hex[:8]}"
    from policy.toy.checkpoint import save_checkpoint
    from policy.toy.model import MoEConfig, MoETransformer

    ckpt = tmp_path / "ckpt"  # a real (tiny) checkpoint: the registry refuses unloadable ones
    save_checkpoint(MoETransformer(MoEConfig(d_model=16, n_layers=1, n_heads=2, n_experts=2,
                                             top_k=1, d_ff=16, max_seq_len=32)), ckpt)
    mlflow.set_tracking_uri(mlflow_server.uri)
    mlflow.set_experiment("cas-test")
    with mlflow.start_run():
        v1, v2, v3 = (registry.log_checkpoint(ckpt, model_name=name).version for _ in range(3))
    uri = mlflow_server.uri
    registry.promote(uri, name, v1, expected=None)
    assert registry.promote(uri, name, v2, expected=v1) == v1
    # v3 was gated against v1, but v2 was promoted meanwhile: refused, nothing moves.
    with pytest.raises(registry.ChampionMoved, match=f"champion is v{v2}"):
        registry.promote(uri, name, v3, expected=v1)
    assert registry.resolve_alias(uri, name, registry.CHAMPION) == v2
    assert registry.resolve_alias(uri, name, registry.PREVIOUS_CHAMPION) == v1
    assert registry.promote(uri, name, v2, expected=v1) == v2  # a retried promotion: no-op


HOLDER = """
import sys, time
from runtime.lease import LeaseLost, ModelLease
lease = ModelLease(sys.argv[1], sys.argv[2], ttl_s=3.0, settle_s=0.1)
lease.acquire()
print("token", lease.token, flush=True)
while True:
    try:
        lease.check()
    except LeaseLost as e:
        print("lost:", e, flush=True)
        time.sleep(2.0)  # the renewal thread's next ticks: it must not write the tag again
        sys.exit(3)
    time.sleep(0.2)
"""


def test_a_holder_stalled_past_its_lease_stops_and_never_retakes_it(mlflow_server, tmp_path):
    import os
    import signal

    from runtime.lease import ModelLease

    name = f"lease-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "holder.log"
    with open(out, "w") as log:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, mlflow_server.uri, name],
                                  stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 60
        while "token" not in out.read_text():
            assert holder.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.1)
        holder.send_signal(signal.SIGSTOP)  # stalled past its 3 s lifetime
        other = ModelLease(mlflow_server.uri, name, ttl_s=30, wait_s=20, settle_s=0.1, poll_s=0.3)
        with other:  # takes the expired lease with a larger token, then releases it
            assert other.token == 2
        assert other.read() is None
        holder.send_signal(signal.SIGCONT)
        assert holder.wait(timeout=30) == 3, out.read_text()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert "a later holder took token 2" in out.read_text()
    assert other.read() is None  # released by the other holder and never retaken
    assert other.fence() == 2
