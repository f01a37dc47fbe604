"""The conformance harness: a real `pigeon serve` on a free 127.0.0.1 port,
started with clients/conformance/policies and tokens.yaml (see
clients/conformance/README.md), and the run-time check that every scenario
listed for the python client ran."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

from harness import RAN, ROOT, SCENARIOS, python_scenarios


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `pigeon serve` process; restartable on the same port and data.
    ``catalog`` is a policy directory with its tokens.yaml, instead of the
    conformance catalog."""

    def __init__(self, binary: str, data: str = "", port: int | None = None, catalog: str | None = None) -> None:
        self.binary = binary
        self.data = data
        self.port = port or free_port()
        self.catalog = catalog
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="pigeon-serve-", suffix=".log", delete=False)

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/ws"

    def start(self) -> "Server":
        policies = self.catalog or str(ROOT / "clients/conformance/policies")
        tokens = os.path.join(self.catalog, "tokens.yaml") if self.catalog else str(ROOT / "clients/conformance/tokens.yaml")
        cmd = [
            self.binary, "serve",
            "--addr", f"127.0.0.1:{self.port}",
            "--data", self.data,
            "--policies", policies,
            "--tokens", tokens,
        ]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pigeon serve exited with {self.proc.returncode}; log: {self.log.name}")
            try:
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(self.http + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"pigeon serve did not answer /health; log: {self.log.name}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@pytest.fixture(scope="session")
def pigeon_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    env = os.environ.get("PIGEON_BIN")
    if env:
        return env
    out = tmp_path_factory.mktemp("bin") / "pigeon"
    subprocess.run(["nice", "go", "build", "-o", str(out), "./cmd/pigeon"], cwd=ROOT, check=True)
    return str(out)


@pytest.fixture(scope="session")
def server(pigeon_bin: str):
    s = Server(pigeon_bin).start()
    yield s
    s.stop()


@pytest.fixture
def own_server(pigeon_bin: str):
    """A server of the test's own, for scenarios that kill it."""
    d = tempfile.mkdtemp(prefix="pigeon-data-")
    s = Server(pigeon_bin, data=d)
    yield s
    s.stop(signal.SIGKILL)
    shutil.rmtree(d, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With PIGEON_REQUIRE_ALL_SCENARIOS=1 (ci.sh sets it), fail the run when
    a scenario listed for python did not run."""
    if os.environ.get("PIGEON_REQUIRE_ALL_SCENARIOS") != "1":
        return
    missing = sorted(python_scenarios() - RAN)
    if missing:
        print("\nscenarios listed for python that did not run: " + ", ".join(missing))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        print(f"\nall {len(python_scenarios())} scenarios listed for python ran")


__all__ = ["Server", "free_port", "json", "SCENARIOS"]
