"""Internal: the engine processes' start-up hook, no stable API (docs/architecture.md, "The self-test wall").

Loaded by every Python process the engine tool starts (this directory is put first on
PYTHONPATH): the driver, and SGLang's scheduler and detokenizer subprocesses, which SGLang spawns
and which therefore cannot be set up by the parent. Does nothing unless the tool set
EAGLE3_CONFORMANCE_SGLANG_ENGINE=1. See eagle3_conformance/tools/sglang_engine/bootstrap.py."""

import os

if os.environ.get("EAGLE3_CONFORMANCE_SGLANG_ENGINE") == "1":
    from eagle3_conformance.tools.sglang_engine import bootstrap

    bootstrap.process_start()
