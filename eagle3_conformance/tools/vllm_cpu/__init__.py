"""vLLM 0.33.0's real model classes in-process on CPU (:mod:`.harness`), and its model runners'
own aux-layer id readers (:mod:`.ids`). Needs the vLLM environment (``tox -e vllm``)."""
