"""What the tools share without being a tool: the CPU harnesses' lifecycle (``cpu_harness``), the
FP8 payload of hs-connectors' hidden states (``fp8_payload``) and the files that make a speculators
Arrow dataset directory (``arrow_dir``). A tool may import this package; it imports no tool
(tests/test_structure.py)."""
