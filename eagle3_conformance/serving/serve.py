"""SGLang's real HTTP server with the project's CPU recipe: ``eagle3-conformance serve -- ARGS`` (the verb,
:mod:`eagle3_conformance.cli.serve`), or ``python -m eagle3_conformance.serving.serve -- ARGS``.

``ARGS`` are ``python -m sglang.launch_server`` arguments, passed through unchanged (the user's own
flags: model, draft, speculative settings, ``--forward-hooks``, port...). On a host without CUDA the
recipe of docs/REFERENCE.md section 4.1 (config B) is added, exactly as :mod:`.tools.sglang_engine.launch`
sets it for ``sglang.Engine``: the environment of :func:`~.tools.sglang_engine.launch.child_env`
(``SGLANG_USE_CPU_ENGINE=1``, the ``sitecustomize`` that loads the version guards, the ``sgl_kernel``
stand-in and the patches (four: two for EAGLE on torch_native, two for MLA targets and drafts) into every process SGLang spawns) and, unless ARGS already name them,
``--device cpu --attention-backend torch_native``. With ``--device cuda`` (or on a CUDA host) nothing
is stood in: the server is SGLang's own, the same command a GPU runner would run (prepared, never run on
a GPU).

The server runs in its own process group; SIGINT / SIGTERM to this process, or its own exit, kill the
whole group (scheduler and detokenizer included), so no process is orphaned. The exit status is the
server's (2 on bad use of this launcher).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from typing import Optional, Sequence

CPU_DEFAULTS = (("--device", "cpu"), ("--attention-backend", "torch_native"))
DEVICES = ("auto", "cpu", "cuda")
DEVICE_HELP = ("cpu: the CPU recipe (stand-ins, patches); cuda: SGLang as it is (prepared, never run on a GPU); "
               "auto: cuda when torch sees a GPU, else cpu")
NO_ARGS = "no sglang.launch_server arguments after '--' (at least --model-path)"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def server_command(args: Sequence[str], device: str) -> list[str]:
    """The ``sglang.launch_server`` command line for ``args`` on ``device`` ("cpu" adds the recipe's
    ``--device`` / ``--attention-backend`` unless ``args`` name them, in either spelling)."""
    cmd = [sys.executable, "-m", "sglang.launch_server", *args]
    if device == "cpu":
        named = {a.split("=", 1)[0].replace("_", "-") for a in args if a.startswith("--")}
        for flag, value in CPU_DEFAULTS:
            if flag not in named:
                cmd += [flag, value]
    return cmd


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        prog="python -m eagle3_conformance.serving.serve",
        description="Start SGLang's real HTTP server (sglang.launch_server) with the project's CPU recipe. "
                    "Everything after '--' is passed to sglang.launch_server unchanged.")
    p.add_argument("--device", choices=DEVICES, default="auto", help=DEVICE_HELP)
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        own, rest = argv[:i], argv[i + 1:]
    else:
        own, rest = [], argv
    ns = p.parse_args(own)
    if not rest:
        p.error(NO_ARGS)
    return ns, rest


def main(argv: Optional[Sequence[str]] = None) -> int:
    ns, rest = _parse(sys.argv[1:] if argv is None else argv)
    return serve(rest, ns.device)


def serve(args: Sequence[str], device: str = "auto") -> int:
    """Run ``sglang.launch_server ARGS`` on ``device`` (``auto``, ``cpu``, ``cuda``) until it exits or this
    process is told to stop; returns the server's exit status (128 + N when ended by signal N)."""
    from eagle3_conformance.tools.sglang_engine.launch import child_env

    device = device if device != "auto" else ("cuda" if _cuda_available() else "cpu")
    cmd = server_command(args, device)
    proc = subprocess.Popen(cmd, env=child_env(device), start_new_session=True)

    def stop(signum, frame):  # forward, then reap the group below
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        code = proc.wait()
    finally:
        from eagle3_conformance.environment.procgroup import kill_group

        kill_group(proc)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
