"""Internal: the engine processes' start-up hook, no stable API (docs/architecture.md, "The self-test wall").

Loaded by every Python process the engine tool starts (this directory is put first on
PYTHONPATH): the driver, and SGLang's scheduler and detokenizer subprocesses, which SGLang spawns
and which therefore cannot be set up by the parent. Does nothing unless the tool set
EAGLE3_CONFORMANCE_SGLANG_ENGINE=1, nor in multiprocessing's resource tracker (a process of
the standard library's own code that imports neither torch nor SGLang: the set-up, about 1.5 s of CPU
with the torch import, bought it nothing; issue 42 item 4). See
eagle3_conformance/tools/sglang_engine/bootstrap.py."""

import os
import sys

RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"

if os.environ.get("EAGLE3_CONFORMANCE_SGLANG_ENGINE") == "1" and not any(
        a.startswith(RESOURCE_TRACKER) for a in getattr(sys, "orig_argv", ())):
    from eagle3_conformance.tools.sglang_engine import bootstrap

    bootstrap.process_start()
