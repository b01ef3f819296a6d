"""Types of the public names that ``__init__.py`` imports on first use (docs/api.md)."""

from __future__ import annotations

from eagle3_conformance.acceptance.decision import Decision as Decision
from eagle3_conformance.acceptance.decision import decide as decide
from eagle3_conformance.acceptance.decision import decide_paired as decide_paired
from eagle3_conformance.acceptance.decision import overall as overall
from eagle3_conformance.authoring.gate import gate_warnings as gate_warnings
from eagle3_conformance.authoring.gate import gated_contract as gated_contract
from eagle3_conformance.authoring.gate import gated_text as gated_text
from eagle3_conformance.authoring.init_families import derive_any_contract as derive_contract
from eagle3_conformance.authoring.yaml_doc import dump_contract as dump_contract
from eagle3_conformance.contract import Contract as Contract
from eagle3_conformance.contract import ContractError as ContractError
from eagle3_conformance.contract import load_contract as load_contract
from eagle3_conformance.core.errors import InputError as InputError
from eagle3_conformance.core.errors import UsageError as UsageError
from eagle3_conformance.core.exit_codes import ExitCode as ExitCode
from eagle3_conformance.core.findings import Finding as Finding
from eagle3_conformance.diagnose import Diagnosis as Diagnosis
from eagle3_conformance.diagnose import diagnose as diagnose_findings
from eagle3_conformance.reference import ReferenceError as ReferenceError
from eagle3_conformance.reference import load_reference_model as load_reference_model
from eagle3_conformance.report import render_text as render_text
from eagle3_conformance.report import report_doc as report_doc
from eagle3_conformance.report import verdict as verdict
from eagle3_conformance.report import write_json as write_json
from eagle3_conformance.scan.driver import scan as check_data
from eagle3_conformance.scan.formats import detect_format as detect_format
from eagle3_conformance.scan.options import ScanError as ScanError
from eagle3_conformance.scan.options import ScanOptions as ScanOptions
from eagle3_conformance.scan.results import ScanResult as ScanResult
from eagle3_conformance.server_accept.session import Options as AcceptOptions
from eagle3_conformance.server_accept.session import measure as measure_acceptance
from eagle3_conformance.serving.captures import judge as judge_captures
from eagle3_conformance.serving.captures import read_dir as read_captures

__version__: str
__all__ = ["__version__", "ExitCode", "InputError", "UsageError", "Contract", "ContractError",
           "load_contract", "gated_contract", "gated_text", "gate_warnings", "derive_contract",
           "dump_contract", "check_data", "ScanOptions", "ScanResult", "ScanError", "detect_format",
           "load_reference_model", "ReferenceError", "read_captures", "judge_captures", "AcceptOptions",
           "measure_acceptance", "Decision", "decide", "decide_paired", "overall", "Finding", "verdict",
           "render_text", "report_doc", "write_json", "Diagnosis", "diagnose_findings"]

def __getattr__(name: str) -> object: ...
def __dir__() -> list[str]: ...
