// Benchmarks against a local `pigeon serve` (PIGEON_BIN, else built):
//  1. pipelined governed publishes per second on one connection;
//  2. publish → deliver round trip (p50, p99) of single messages.
//   npm run bench            (BENCH_N=50000 BENCH_RTT=2000 to change the counts)
import { connect } from "../dist/index.js";
import { Server } from "../test/harness.mjs";

const N = Number(process.env.BENCH_N ?? 50_000);
const RTT = Number(process.env.BENCH_RTT ?? 2_000);
const srv = await Server.start();
try {
  const sensor = await connect(srv.ws, "sensor-token", ["events.telemetry"]);
  const msg = (i) => ({ type: "telemetry.reading", subject: "events.telemetry", intent: "report", data: { kind: "bench", site: "lab", value: i } });
  // Warm up.
  await Promise.all(Array.from({ length: 2000 }, (_, i) => sensor.publish(msg(i))));
  let t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const ps = [];
  for (let i = 0; i < N; i++) ps.push(sensor.publish(msg(i)));
  const ds = await Promise.allSettled(ps);
  let secs = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const ok = ds.filter((d) => d.status === "fulfilled").length;
  console.log(`pipelined publish: ${N} messages in ${secs.toFixed(2)} s = ${Math.round(ok / secs)} msgs/s (${N - ok} refused; client CPU ${Math.round(((cpu.user + cpu.system) / 1e6 / secs) * 100)}%)`);

  const monitor = await connect(srv.ws, "monitor-token", ["events.telemetry"]);
  let wake;
  await monitor.subscribe("events.telemetry", (m) => m.data.kind === "rtt" && wake?.(), { selector: "/kind=rtt" });
  const samples = [];
  for (let i = 0; i < RTT; i++) {
    const got = new Promise((r) => (wake = r));
    t0 = performance.now();
    await sensor.publish({ ...msg(i), data: { kind: "rtt", site: "lab", value: i } });
    await got;
    samples.push(performance.now() - t0);
  }
  samples.sort((a, b) => a - b);
  const q = (p) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))].toFixed(3);
  console.log(`publish→deliver round trip: p50 ${q(0.5)} ms, p99 ${q(0.99)} ms (${RTT} samples)`);
  await Promise.all([sensor.close(), monitor.close()]);
} finally {
  await srv.stop();
}
