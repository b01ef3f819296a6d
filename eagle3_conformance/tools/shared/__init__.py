"""What the tools share without being a tool: the CPU harnesses' lifecycle (``cpu_harness``), the
FP8 payload of hs-connectors' hidden states (``fp8_payload``), the files that make a speculators
Arrow dataset directory (``arrow_dir``) and the names of vLLM's extraction files (``vllm_files``). A
tool may import this package; it imports no tool (tests/test_structure.py)."""
