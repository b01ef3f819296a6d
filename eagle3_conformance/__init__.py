"""EAGLE-3 draft-boundary conformance: contracts, reference capture, path adapters, checks.

The public API is the names in ``__all__`` below (documented on ``docs/api.md``): what each verb does,
from Python. They follow the project's compatibility policy; every other module path is internal and
may change in any release. Importing this package is cheap: each public name is imported on first
use (module ``__getattr__``; their types are in ``__init__.pyi``), so torch, transformers, speculators and SGLang load only when a name that
needs them is touched. On a core-only install (no torch) every name imports; the two functions that
need torch to run (``check_data``, ``load_reference_model``) raise ``ModuleNotFoundError`` naming the
extra to install (``[reference]``) when called.
"""

from __future__ import annotations

import importlib

__version__ = "0.2.0"

# The module paths that moved in 0.2.0 stay importable, with a DeprecationWarning, until 0.3.0
# (docs/compatibility.md, eagle3_conformance/core/moved.py).
from eagle3_conformance.core import moved as _moved  # noqa: E402

_moved.install()

# public name -> (defining module, name there). No public name is also a subpackage's name (the
# import system would overwrite it with the module), hence check_data and diagnose_findings. Aliases give a verb's function a name that says
# which verb it serves where the module's own name is generic (``judge``, ``measure``, ``Options``).
_PUBLIC: dict[str, tuple[str, str]] = {
    # exit codes and errors
    "ExitCode": ("eagle3_conformance.core.exit_codes", "ExitCode"),
    "InputError": ("eagle3_conformance.core.errors", "InputError"),
    "UsageError": ("eagle3_conformance.core.errors", "UsageError"),
    # contracts: load, validate (the gate every verb uses), init
    "Contract": ("eagle3_conformance.contract", "Contract"),
    "ContractError": ("eagle3_conformance.contract", "ContractError"),
    "load_contract": ("eagle3_conformance.contract", "load_contract"),
    "gated_contract": ("eagle3_conformance.authoring.gate", "gated_contract"),
    "gated_text": ("eagle3_conformance.authoring.gate", "gated_text"),
    "gate_warnings": ("eagle3_conformance.authoring.gate", "gate_warnings"),
    "derive_contract": ("eagle3_conformance.authoring.init_families", "derive_any_contract"),
    "dump_contract": ("eagle3_conformance.authoring.yaml_doc", "dump_contract"),
    # check-data
    "check_data": ("eagle3_conformance.scan.driver", "scan"),
    "ScanOptions": ("eagle3_conformance.scan.options", "ScanOptions"),
    "ScanResult": ("eagle3_conformance.scan.results", "ScanResult"),
    "ScanError": ("eagle3_conformance.scan.options", "ScanError"),
    "detect_format": ("eagle3_conformance.scan.formats", "detect_format"),
    "load_reference_model": ("eagle3_conformance.reference", "load_reference_model"),
    "ReferenceError": ("eagle3_conformance.reference", "ReferenceError"),
    # check-captures
    "read_captures": ("eagle3_conformance.serving.captures", "read_dir"),
    "judge_captures": ("eagle3_conformance.serving.captures", "judge"),
    # accept
    "AcceptOptions": ("eagle3_conformance.server_accept.session", "Options"),
    "measure_acceptance": ("eagle3_conformance.server_accept.session", "measure"),
    "Decision": ("eagle3_conformance.acceptance.decision", "Decision"),
    "decide": ("eagle3_conformance.acceptance.decision", "decide"),
    "decide_paired": ("eagle3_conformance.acceptance.decision", "decide_paired"),
    "overall": ("eagle3_conformance.acceptance.decision", "overall"),
    # the report and its diagnoses
    "Finding": ("eagle3_conformance.core.findings", "Finding"),
    "verdict": ("eagle3_conformance.report", "verdict"),
    "render_text": ("eagle3_conformance.report", "render_text"),
    "report_doc": ("eagle3_conformance.report", "report_doc"),
    "write_json": ("eagle3_conformance.report", "write_json"),
    "Diagnosis": ("eagle3_conformance.diagnose", "Diagnosis"),
    "diagnose_findings": ("eagle3_conformance.diagnose", "diagnose"),
}

__all__ = ["__version__", *_PUBLIC]  # written out in __init__.pyi for type checkers and linters


def __getattr__(name: str) -> object:
    """Import a public name on first use (PEP 562); AttributeError for any other name."""
    try:
        module, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'eagle3_conformance' has no attribute {name!r}") from None
    try:
        value = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as e:  # an extra is missing: a stand-in that says which (or e re-raised)
        from eagle3_conformance.environment.engines import needs_extra

        return needs_extra(f"eagle3_conformance.{name}", e)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
