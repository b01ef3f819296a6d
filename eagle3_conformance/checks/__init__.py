"""Pure checks: (contract, capture[, reference]) -> list[Finding], one registry.

Every check is a small function with one job, declared once with
:func:`eagle3_conformance.checks.registry.check` in the module of its fault family; its docstring
names the fault-kinds.md kind it exists for. None imports a path adapter. Tensors in, findings out;
nothing is modified.

========================  ===================================================================
module                    checks
========================  ===================================================================
``registry``              the decorator and the registry every runner reads
``common``                what checks share (the finding of a capture, gate keys, row masks)
``shape``                 availability, slot count, widths, dtypes, finiteness, rows, stored ids
``identity``              slot identity, order and the embedding by fingerprint
``draft_fc``              the engine's resolved ids, the draft's fc ran and its shape
``verifier``              the verifier slot's identity and norm state, and that stored data has it
``bands``                 per-token RMS in the calibrated norm bands
``alignment``             rows, input ids, loss mask and positions at the contract's offsets
``row_fingerprint``       every row is its token's declared boundary
``tensor_dtypes``         per-tensor dtypes of ``contract.dtypes``
``magnitude``             magnitude against the reference, the draft's pre-fc norm
``transport``             hs-connectors FP8 payloads and their error
``cross_path``            two paths agree on the same tokens
``facts``                 engine releases, the accept-length gate, engine losslessness, graphed vs eager
``vocab``                 d2t/t2d mapping, chat template, golden token ids
``precision``             the data's noise is the declared production precision's (issue 23)
``residual``              a slot that is the layer's update without its residual (issue 23)
``verified_rows``         after a partial accept, the draft's rows are the accepted tokens' own verify rows
``degenerate``            a slot whose rows are all zero or one constant (R66)
``acceptance``            the draft accepts more than almost nothing, by the engine's own counters (issue 41)
``invariance``            the engine against itself: a prompt under a variation vs its plain run (issue 45)
``runtime``               the draft's own runtime on an engine: its dtype, finite logits, quantization (R89, R94)
``writers``               one boundary per slot across a dataset's samples: writers that disagree (R90)
``multimodal``            a multimodal target's data written with vision features (R92)
``suite``                 :func:`run_checks`: every check on one capture, in registry order
========================  ===================================================================

The modules are imported below in that order, which is the registry's (and the findings') order.
"""

from eagle3_conformance.checks import registry  # noqa: F401  (first: the others register into it)
from eagle3_conformance.checks.common import (GATE_CROSS_PATH, GATE_NOISE, GATE_ROW_FLOOR, NO_MATCH_COSINE,  # noqa: F401
                                              dtype_name, finding, keep_rows, slot_label, usable, verifier_rows)
from eagle3_conformance.checks.shape import (check_dtype, check_finite, check_row_count, check_sample_available,  # noqa: F401
                                             check_slot_count, check_token_ids_match, check_width)
from eagle3_conformance.checks.identity import (Verdict, check_no_embedding, check_slot_identity,  # noqa: F401
                                                check_slot_order, identify, judge, resolvable, similarity_profile)
from eagle3_conformance.checks.draft_fc import check_engine_mapping, check_fc_ran, check_fc_shape  # noqa: F401
from eagle3_conformance.checks.verifier import (check_verifier_identity, check_verifier_norm_state,  # noqa: F401
                                                check_verifier_present)
from eagle3_conformance.checks.bands import band_rows, check_norm_bands  # noqa: F401
from eagle3_conformance.checks.alignment import (check_feature_alignment, check_input_token_alignment,  # noqa: F401
                                                 check_loss_mask_alignment, check_position_alignment,
                                                 check_target_alignment)
from eagle3_conformance.checks.row_fingerprint import check_row_fingerprint  # noqa: F401
from eagle3_conformance.checks.tensor_dtypes import check_tensor_dtypes  # noqa: F401
from eagle3_conformance.checks.magnitude import PRE_FC_FIT_TOL, check_magnitude, check_pre_fc_norm  # noqa: F401
from eagle3_conformance.checks.transport import FP8_DTYPES, GATE_FP8, check_fp8_scale_error, check_transfer_backend  # noqa: F401
from eagle3_conformance.checks.cross_path import check_cross_path  # noqa: F401
from eagle3_conformance.checks.facts import (  # noqa: F401
    check_accept_length, check_accept_regression, check_engine_lossless, check_engine_version, check_graph_acceptance,
    check_vllm_version)
from eagle3_conformance.checks.vocab import (check_chat_template, check_draft_vocab, check_golden_tokens,  # noqa: F401
                                             check_vocab_mapping, mapping_problems, mapping_sha256)
from eagle3_conformance.checks.precision import check_production_precision  # noqa: F401
from eagle3_conformance.checks.residual import check_residual_missing  # noqa: F401
from eagle3_conformance.checks.verified_rows import check_verified_rows  # noqa: F401
from eagle3_conformance.checks.degenerate import check_slot_degenerate, degenerate  # noqa: F401
from eagle3_conformance.checks.acceptance import USELESS_MAX_DRAFTS_PER_STEP, check_draft_acceptance  # noqa: F401
from eagle3_conformance.checks.invariance import check_engine_invariance  # noqa: F401
from eagle3_conformance.checks.runtime import check_draft_quantization, check_draft_runtime  # noqa: F401
from eagle3_conformance.checks.writers import check_writer_consistency, writer_findings  # noqa: F401
from eagle3_conformance.checks.multimodal import check_vision_features  # noqa: F401
from eagle3_conformance.checks.suite import run_checks  # noqa: F401
