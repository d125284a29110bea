"""A fleet of serving replicas: separate uvicorn processes on free 127.0.0.1 ports.

``Fleet.start(...)`` launches ``python -m deploy.replica.serve_main`` per replica (each in its own
process group, configured by ``RATCHET_*`` variables, logging to ``workdir/<replica>.log``) and
waits until every ``/readyz`` answers. Like the services of runtime/services.py, a replica (and
the router process) started from the main thread dies with the process that started it, even if
that one is SIGKILLed (``die_with_parent``). ``rolling_reload(version)`` reloads one replica at a
time and waits for it to report the new version before touching the next, so the fleet always has
serving replicas (and each replica keeps serving its old model while it loads the new one).
``stop()`` stops each replica by its PID.

Deliberately left out: traffic splitting (deploy/fleet/router.py), autoscaling, restarting crashed
replicas.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from runtime.services import die_with_parent, free_port, stop_child

log = logging.getLogger(__name__)

_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Replica:
    """One replica process."""

    replica_id: str
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class ReloadResult:
    replica_id: str
    previous_version: int | None
    version: int
    seconds: float


@dataclass
class Fleet:
    """Replicas serving one registered model; build with ``Fleet.start``."""

    replicas: list[Replica]
    admin_token: str
    workdir: Path
    reload_log: list[ReloadResult] = field(default_factory=list)
    api_keys_path: Path | None = None
    """Client-key store shared by the replicas (default ``workdir/api_keys.json``)."""

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    @classmethod
    def start(
        cls,
        *,
        n_replicas: int,
        tracking_uri: str,
        model_name: str,
        bootstrap: str | None,
        workdir: Path,
        admin_token: str,
        version: int | None = None,
        alias: str = "champion",
        local_mode: bool = False,
        name: str = "replica",
        ready_timeout_s: float = 180.0,
        extra_env: dict[str, str] | None = None,
        signal_max_skew_s: float | None = None,
        port: int | None = None,
        api_keys_path: Path | None = None,
        wait: bool = True,
        behind_router: bool = False,
    ) -> Fleet:
        """Start ``n_replicas`` replicas of ``model_name`` (``version`` pinned, else ``alias``).

        The replicas share one client-key store, ``api_keys_path`` (default
        ``workdir/api_keys.json``; give two fleets the same one to share keys).
        ``signal_max_skew_s``: how far a signal's ``created`` may be from the receive time (a
        simulator compressing time needs more than its longest delay). ``port``: bind the single
        replica there instead of a free port. ``wait=False`` returns once the processes are
        spawned (a replica retries until the registry and the alias exist): the caller can
        bootstrap the champion while the replicas import, then :meth:`wait_ready`.
        ``behind_router``: clients reach the replicas only through the fleet's router, so they
        record its arm header in each completion event (replica setting ``trust_arm_header``).
        """
        if n_replicas < 1:
            raise ValueError(f"n_replicas must be >= 1, got {n_replicas}")
        if port is not None and n_replicas != 1:
            raise ValueError("port can only be given for a single replica")
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        keys = Path(api_keys_path or workdir / "api_keys.json").resolve()
        fleet = cls([], admin_token, workdir, api_keys_path=keys)
        try:
            for i in range(n_replicas):
                env = {
                    "RATCHET_TRACKING_URI": tracking_uri,
                    "RATCHET_MODEL_NAME": model_name,
                    "RATCHET_ALIAS": alias,
                    "RATCHET_ADMIN_TOKEN": admin_token,
                    "RATCHET_LOCAL_MODE": "true" if local_mode else "false",
                    "RATCHET_SPOOL_DIR": str(workdir / "spool"),
                    "RATCHET_CACHE_DIR": str(workdir / "model-cache"),
                    "RATCHET_API_KEYS_PATH": str(keys),
                    "RATCHET_TRUST_ARM_HEADER": "true" if behind_router else "false",
                    **(
                        {"RATCHET_SIGNAL_MAX_SKEW_S": str(signal_max_skew_s)}
                        if signal_max_skew_s is not None
                        else {}
                    ),
                    **({"RATCHET_KAFKA_BOOTSTRAP": bootstrap} if bootstrap else {}),
                    **({"RATCHET_VERSION": str(version)} if version else {}),
                    **(extra_env or {}),
                }
                fleet.replicas.append(_spawn(f"{name}-{i}", workdir, env, port=port))
            if wait:
                fleet.wait_ready(timeout_s=ready_timeout_s)
        except BaseException:
            fleet.stop()
            raise
        return fleet

    def create_api_key(self, name: str, org: str | None = None) -> str:
        """A new client key (in organisation ``org``, if given), valid on every replica of this
        fleet."""
        from deploy.replica.api_keys import ApiKeyStore

        store = ApiKeyStore(self.api_keys_path or self.workdir / "api_keys.json")
        return store.create(name, org)[1]

    # -- readiness ----------------------------------------------------------------------------
    def wait_ready(self, *, timeout_s: float = 180.0, version: int | None = None) -> None:
        """Wait until every replica's /readyz is 200 (and serves ``version`` if given)."""
        for replica in self.replicas:
            _wait_replica(replica, timeout_s=timeout_s, version=version)

    def versions(self) -> dict[str, int | None]:
        """Version served by each replica, from /readyz."""
        out = {}
        for r in self.replicas:
            resp = httpx.get(f"{r.url}/readyz", timeout=5)
            out[r.replica_id] = resp.json()["version"]
        return out

    # -- reload -------------------------------------------------------------------------------
    def rolling_reload(self, version: int, *, timeout_s: float = 180.0) -> list[ReloadResult]:
        """Reload replicas to ``version`` one at a time; each must be ready before the next."""
        results = []
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        for r in self.replicas:
            start = time.perf_counter()
            resp = httpx.post(
                f"{r.url}/admin/reload",
                json={"version": version},
                headers=headers,
                timeout=timeout_s,
            )
            resp.raise_for_status()
            _wait_replica(r, timeout_s=timeout_s, version=version)
            body = resp.json()
            results.append(
                ReloadResult(
                    r.replica_id, body["previous_version"], version, time.perf_counter() - start
                )
            )
            log.info("replica %s now serves version %d", r.replica_id, version,
                     extra={"terminal": False})
        if results:  # one terminal line for the fleet, each replica in the log
            log.info("%s now serve%s version %d", ", ".join(x.replica_id for x in results),
                     "s" if len(results) == 1 else "", version)
        self.reload_log.extend(results)
        return results

    # -- lifecycle ----------------------------------------------------------------------------
    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop every replica by PID (SIGTERM to its group, then SIGKILL)."""
        for r in self.replicas:
            stop_child(r.proc, timeout_s=timeout_s)
            (self.workdir / f"{r.replica_id}.pid").unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _spawn(
    replica_id: str,
    workdir: Path,
    env: dict[str, str],
    module: str = "deploy.replica.serve_main",
    port: int | None = None,
) -> Replica:
    port = port or free_port()
    log_path = workdir / f"{replica_id}.log"
    full_env = {
        **os.environ,
        **env,
        "RATCHET_REPLICA_ID": replica_id,
        "RATCHET_PORT": str(port),
        "RATCHET_HOST": "127.0.0.1",
        "RATCHET_ROUTER_PORT": str(port),
        "RATCHET_ROUTER_HOST": "127.0.0.1",
        "PYTHONPATH": os.pathsep.join(
            [str(_REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module],
            cwd=_REPO_ROOT,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # None off the main thread: see its docstring
        )
    (workdir / f"{replica_id}.pid").write_text(str(proc.pid))
    return Replica(replica_id, f"http://127.0.0.1:{port}", proc, log_path)


def _wait_replica(replica: Replica, *, timeout_s: float, version: int | None) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        code = replica.proc.poll()
        if code is not None:
            tail = replica.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{replica.replica_id} exited with {code}:\n{tail}")
        try:
            resp = httpx.get(f"{replica.url}/readyz", timeout=2)
            if resp.status_code == 200 and version in (None, resp.json()["version"]):
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{replica.replica_id} at {replica.url} not ready in {timeout_s}s")
        time.sleep(0.2)


@dataclass
class RouterProcess:
    """The router (deploy/fleet/router.py) as its own process; ``url`` is where callers send
    traffic."""

    replica: Replica
    admin_token: str
    workdir: Path

    @property
    def url(self) -> str:
        return self.replica.url

    @classmethod
    def start(
        cls,
        *,
        stable_urls: list[str],
        canary_urls: list[str],
        admin_token: str,
        workdir: Path,
        canary_weight: float = 0.0,
        holdback_urls: list[str] | None = None,
        holdback_share: float = 0.0,
        timeout_s: float = 60.0,
    ) -> RouterProcess:
        """The router process; ``holdback_share`` of users go to ``holdback_urls``."""
        import json

        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        env = {
            "RATCHET_ROUTER_STABLE_URLS": json.dumps(stable_urls),
            "RATCHET_ROUTER_CANARY_URLS": json.dumps(canary_urls),
            "RATCHET_ROUTER_CANARY_WEIGHT": str(canary_weight),
            "RATCHET_ROUTER_HOLDBACK_URLS": json.dumps(list(holdback_urls or [])),
            "RATCHET_ROUTER_HOLDBACK_SHARE": str(holdback_share),
            "RATCHET_ROUTER_ADMIN_TOKEN": admin_token,
        }
        proc = _spawn("router", workdir, env, module="deploy.fleet.router")
        router = cls(proc, admin_token, workdir)
        deadline = time.monotonic() + timeout_s
        while True:
            if router.replica.proc.poll() is not None:
                tail = router.replica.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"router exited:\n{tail}")
            try:
                if httpx.get(f"{router.url}/healthz", timeout=2).status_code == 200:
                    return router
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                router.stop()
                raise TimeoutError(f"router at {router.url} not up in {timeout_s}s")
            time.sleep(0.1)

    def client(self):
        from deploy.fleet.router import RouterClient

        return RouterClient(self.url, self.admin_token)

    def stop(self, timeout_s: float = 15.0) -> None:
        stop_child(self.replica.proc, timeout_s=timeout_s)
        (self.workdir / "router.pid").unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
