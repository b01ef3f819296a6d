"""What the tools share without being a tool: the CPU harnesses' lifecycle (``cpu_harness``), the
FP8 payload of hs-connectors' hidden states (``fp8_payload``), the files that make a speculators
Arrow dataset directory (``arrow_dir``), the names of vLLM's extraction files (``vllm_files``) and the
walk of a ``--files`` argument (``file_spec``). A tool may import this package; it imports no tool (tests/test_structure.py)."""
