"""The conformance harness: a real `pigeon serve` on a port of 127.0.0.1 that
it picks itself (and names in its banner), started with
clients/conformance/policies and tokens.yaml (see
clients/conformance/README.md), and the run-time check that every scenario
listed for the python client ran."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import pytest

from harness import RAN, ROOT, SCENARIOS, python_scenarios


# The line of the banner `pigeon serve` prints once it listens:
# "pigeon: health     http://127.0.0.1:PORT/health".
LISTENING = re.compile(rb"^pigeon: health +https?://\S+:(\d+)/health", re.MULTILINE)

START_TIMEOUT = 20.0  # seconds


class Server:
    """One `pigeon serve` process; restartable on the same port and data.
    ``catalog`` is a policy directory with its tokens.yaml, instead of the
    conformance catalog. Its output goes to the file ``log``."""

    def __init__(self, binary: str, data: str = "", catalog: str | None = None) -> None:
        self.binary = binary
        self.data = data
        self.port = 0  # the system picks it at the first start
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
        """Starts `pigeon serve` and waits until it serves. The first start
        listens on 127.0.0.1:0 and takes the port the system picked from the
        server's banner, so that servers started side by side never race for
        a port; a restart listens on the same port again, for the sessions
        that reconnect to it. Raises, with the server's output so far, when
        the server exits or says nothing of listening in START_TIMEOUT."""
        policies = self.catalog or str(ROOT / "clients/conformance/policies")
        tokens = os.path.join(self.catalog, "tokens.yaml") if self.catalog else str(ROOT / "clients/conformance/tokens.yaml")
        cmd = [
            self.binary, "serve",
            "--addr", f"127.0.0.1:{self.port}",
            "--data", self.data,
            "--policies", policies,
            "--tokens", tokens,
        ]
        # A restart appends to the same file: this run's output starts here.
        self.log.flush()
        since = os.fstat(self.log.fileno()).st_size
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        port = None
        while port is None:
            m = LISTENING.search(self._output(since))
            if m:
                port = int(m.group(1))
            elif self.proc.poll() is not None:
                self._fail(cmd, since, f"it exited with {self.proc.returncode} before it said it listens")
            elif time.monotonic() > deadline:
                self._fail(cmd, since, f"it did not say it listens within {START_TIMEOUT:g} s")
            else:
                time.sleep(0.02)
        self.port = port
        # The listener exists once the banner is out; /health answering 200
        # says the HTTP API is served on it too.
        try:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(self.http + "/health", timeout=max(deadline - time.monotonic(), 1)) as r:
                if r.status != 200:
                    self._fail(cmd, since, f"GET /health answered {r.status}")
        except OSError as e:
            self._fail(cmd, since, f"GET /health: {e}")
        return self

    def _output(self, since: int) -> bytes:
        with open(self.log.name, "rb") as f:
            f.seek(since)
            return f.read()

    def _fail(self, cmd: list[str], since: int, why: str) -> None:
        """Kills the server and raises, saying why, with its output so far."""
        self.kill()
        out = self._output(since).decode(errors="replace")
        raise RuntimeError(f"{shlex.join(cmd)}: {why}; its output so far (log {self.log.name}):\n{out}")

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


__all__ = ["Server", "json", "SCENARIOS"]
