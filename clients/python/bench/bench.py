"""Benchmarks of the Python client against a local `pigeon serve`.

    PIGEON_BIN=/path/to/pigeon .venv/bin/python bench/bench.py [--n 20000] [--rtt 500]

1. pipelined governed publishes per second on one connection (telemetry,
   every gate, publish_batch frames);
2. publish -> deliver round trip on one subscription (p50, p99), one
   message at a time.

Starts its own server (in memory) with the conformance catalog on a free
127.0.0.1 port, and stops it at the end. Bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import Server  # noqa: E402
from harness import ROOT, telemetry  # noqa: E402
from pigeon_client import connect  # noqa: E402


async def pipelined(url: str, n: int) -> float:
    s = await connect(url, "sensor-token", ["events.telemetry"])
    try:
        # warm up
        await asyncio.gather(*[await s.publish_async(telemetry("temp", "warm", i)) for i in range(500)])
        t0 = time.perf_counter()
        futs = [await s.publish_async(telemetry("temp", "bench", i)) for i in range(n)]
        ds = await asyncio.gather(*futs)
        dt = time.perf_counter() - t0
        assert all(d.accepted for d in ds)
        return n / dt
    finally:
        await s.close()


async def sequential(url: str, n: int) -> float:
    """The baseline: one publish at a time, each awaiting its decision."""
    s = await connect(url, "sensor-token", ["events.telemetry"])
    try:
        t0 = time.perf_counter()
        for i in range(n):
            await s.publish(telemetry("temp", "seq", i))
        return n / (time.perf_counter() - t0)
    finally:
        await s.close()


async def round_trip(url: str, n: int) -> tuple[float, float]:
    mon = await connect(url, "monitor-token", ["events.telemetry"])
    sen = await connect(url, "sensor-token", ["events.telemetry"])
    try:
        arrived: asyncio.Queue[float] = asyncio.Queue()
        await mon.subscribe("events.telemetry", lambda d: arrived.put_nowait(time.perf_counter()),
                            selector="/kind=rtt/site=bench")
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            await sen.publish(telemetry("rtt", "bench", i))
            t1 = await asyncio.wait_for(arrived.get(), 5)
            samples.append((t1 - t0) * 1000)
        samples.sort()
        return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]
    finally:
        await mon.close()
        await sen.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000, help="pipelined publishes")
    ap.add_argument("--rtt", type=int, default=500, help="round trips")
    a = ap.parse_args()
    binary = os.environ.get("PIGEON_BIN")
    if not binary:
        binary = os.path.join(tempfile.mkdtemp(), "pigeon")
        subprocess.run(["nice", "go", "build", "-o", binary, "./cmd/pigeon"], cwd=ROOT, check=True)
    srv = Server(binary).start()
    try:
        rate = asyncio.run(pipelined(srv.ws, a.n))
        seq = asyncio.run(sequential(srv.ws, 2000))
        p50, p99 = asyncio.run(round_trip(srv.ws, a.rtt))
    finally:
        srv.stop()
    print(f"pipelined publish, one connection: {rate:,.0f} msgs/s ({a.n} governed publishes)")
    print(f"sequential publish (baseline, one awaited at a time): {seq:,.0f} msgs/s")
    print(f"publish -> deliver round trip: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({a.rtt} samples)")


if __name__ == "__main__":
    main()
