"""``eagle3-conformance accept`` (issue 34) against local HTTP servers started here: bad input (an
unreachable URL, a server answering 500, one dropping connections, one that never answers, a server
without speculative decoding, baselines from another contract / prompt set / tool version / model),
the figures and the baseline rule on scripted counters, and vLLM's two formats (per-request metrics
and Prometheus counters). The real SGLang server runs in tests/test_server_accept_real.py.

The scripted SGLang answers have the shape of a real SGLang 0.5.23 ``/v1/chat/completions`` answer
with ``return_meta_info`` (recorded from the real server on the SmolLM2 pair, docs/accept.md)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from eagle3_conformance.cli import main
from eagle3_conformance.environment.ports import free_port
from eagle3_conformance.server_accept import prompts as P
from eagle3_conformance.server_accept import vllm as V

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = str(ROOT / "contracts" / "smollm2-135m.yaml")
OTHER_CONTRACT = str(ROOT / "contracts" / "tiny-llama.yaml")

SERVER_INFO = {"version": "0.5.23", "model_path": "/models/smollm2", "served_model_name": "/models/smollm2",
               "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/models/draft",
               "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
               "dtype": "float32", "device": "cpu", "attention_backend": "torch_native", "disable_cuda_graph": False}


def _answer(hist):
    steps = sum(hist)
    comp = steps + sum(j * c for j, c in enumerate(hist)) + 1  # + the token sampled at prefill
    return {"id": "x", "object": "chat.completion", "model": "default",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "..."}, "finish_reason": "length",
                         "meta_info": {"completion_tokens": comp, "spec_verify_ct": steps,
                                       "spec_accept_length": comp / steps, "spec_correct_drafts_histogram": hist}}]}


class Fake:
    """A local HTTP server; ``behaviour(handler, path, body)`` answers each request."""

    def __init__(self, behaviour):
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, doc):
                raw = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                outer.behaviour(self, self.path, None)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                outer.behaviour(self, self.path, json.loads(self.rfile.read(n)))

        self.behaviour = behaviour
        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a client that gave up (a timeout test) is no error of the stand-in; printed, it lands
                # in whichever test captures stderr when the handler wakes

        self.srv = Quiet(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def sglang(hist_of=lambda pid: [10, 4, 2, 1], info=SERVER_INFO, chat=None):
    """A scripted SGLang server: ``hist_of(prompt text)`` gives each request's histogram."""
    def behaviour(h, path, body):
        if path in ("/server_info", "/get_server_info"):
            return h._send(200, info)
        if path == "/v1/chat/completions":
            if chat is not None:
                return chat(h, body)
            return h._send(200, _answer(hist_of(body["messages"][0]["content"])))
        h._send(404, {"detail": "Not Found"})
    return Fake(behaviour)


@pytest.fixture
def serve():
    made = []

    def start(*a, **kw):
        f = sglang(*a, **kw)
        made.append(f)
        return f
    yield start
    for f in made:
        f.close()


def accept(capsys, *argv):
    rc = main(["accept", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- bad input: exit 2 with the request and the server's words --------------------------------------

def test_an_unreachable_url_exits_2_naming_it(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    rc, out, err = accept(capsys, "--server", url, "--contract", CONTRACT, "--prompts", "5")
    assert rc == 2 and "cannot connect" in err and url in err, err


def test_a_url_that_is_no_inference_server_exits_2(capsys):
    f = Fake(lambda h, path, body: h._send(404, {"detail": "Not Found"}))
    try:
        rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5")
    finally:
        f.close()
    assert rc == 2 and "not an SGLang or vLLM server" in err and "HTTP 404" in err, err


def test_a_server_without_speculative_decoding_exits_2_saying_so(capsys, serve):
    f = serve(info={**SERVER_INFO, "speculative_algorithm": None})
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5")
    assert rc == 2 and "without speculative decoding" in err and "speculative_algorithm = None" in err, err


def test_a_server_answering_500_exits_2_naming_the_request_and_its_words(capsys, serve):
    def chat(h, body):
        if "Fibonacci" in body["messages"][0]["content"]:
            return h._send(500, {"error": {"message": "scheduler died: KV cache pool exhausted"}})
        h._send(200, _answer([10, 4, 2, 1]))
    f = serve(chat=chat)
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "8")
    assert rc == 2, err
    assert "prompt code-01" in err and "HTTP 500" in err and "KV cache pool exhausted" in err, err


def test_a_server_dropping_the_connection_mid_run_exits_2_naming_the_request(capsys, serve):
    def chat(h, body):
        if "A train leaves" in body["messages"][0]["content"]:
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)  # no status line: the client sees the connection end
            return
        h._send(200, _answer([10, 4, 2, 1]))
    f = serve(chat=chat)
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "8")
    assert rc == 2 and "prompt math-01" in err and "dropped" in err, err


def test_a_server_that_never_answers_times_out_instead_of_hanging(capsys, serve):
    import time

    def chat(h, body):
        time.sleep(5)
    f = serve(chat=chat)
    t0 = time.perf_counter()
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5", "--request-timeout", "1")
    assert rc == 2 and "no answer within 1 s" in err, err
    assert time.perf_counter() - t0 < 4.5


def test_the_whole_run_has_a_timeout(capsys, serve):
    import time

    def chat(h, body):
        time.sleep(1.5)
        h._send(200, _answer([10, 4, 2, 1]))
    f = serve(chat=chat)
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "8", "--concurrency", "1",
                        "--run-timeout", "2")
    assert rc == 2 and "did not finish within --run-timeout 2 s" in err, err


def test_an_answer_without_meta_info_exits_2(capsys, serve):
    def chat(h, body):
        a = _answer([3, 1])
        del a["choices"][0]["meta_info"]
        h._send(200, a)
    f = serve(chat=chat)
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5")
    assert rc == 2 and "no choices[0].meta_info" in err and "prompt " in err, err


def test_too_few_prompts_for_an_interval_exit_2(capsys, serve):
    f = serve()
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "4")
    assert rc == 2 and "at least 5" in err, err


def _record(capsys, f, tmp_path, name="b.json", *extra):
    out = tmp_path / name
    rc, o, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "8", "--record", str(out), *extra)
    assert rc == 0, o + err
    return out


def test_a_baseline_of_another_prompt_set_or_sampling_exits_2_naming_the_field(capsys, serve, tmp_path):
    """What a baseline compares is its prompts, their tokens and the sampling: another prompt set or
    sampling is another measurement (exit 2, the field named); the token budget is the baseline's."""
    f = serve()
    b = _record(capsys, f, tmp_path)
    for field, value in (("prompt_set.version", "0"), ("sampling", {"temperature": 0.7}), ("format", 9)):
        doc = json.loads(b.read_text())
        if field == "prompt_set.version":
            doc["prompt_set"]["version"] = value
        else:
            doc[field] = value
        bad = tmp_path / f"bad-{field}.json"
        bad.write_text(json.dumps(doc))
        rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--baseline", str(bad))
        assert rc == 2 and f"field {field} is {value!r}" in err, err
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--baseline", str(b), "--max-tokens", "32")
    assert rc == 2 and "the baseline" in err and "ran 64" in err, err
    bad.write_text("{not json")
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--baseline", str(bad))
    assert rc == 2 and "not JSON" in err and str(bad) in err, err


def _copy_draft(dst: Path) -> Path:
    from eagle3_conformance.testbed.trained_draft import RECIPE, ensure_trained_draft

    src = Path(ensure_trained_draft(RECIPE).draft_dir)
    dst.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_a_baseline_survives_edits_that_do_not_change_what_is_compared(capsys, serve, tmp_path):
    """Issue 41: after the edit docs/own-server.md asks for (precision.serving set to the launch's --dtype)
    and after pointing the server at an identical export of the draft under another path, accept --baseline
    compares and says what changed (the contract field; the draft path, same content by digest; the tool
    version), where it used to refuse every earlier baseline on the contract's hash."""
    first, second = _copy_draft(tmp_path / "export-1"), _copy_draft(tmp_path / "export-2")
    f = serve(hist_of=_by_domain(_varied), info={**SERVER_INFO, "speculative_draft_model_path": str(first)})
    b = _record(capsys, f, tmp_path)
    doc = json.loads(b.read_text())
    assert doc["format"] == 2 and doc["sampling"] == {"temperature": 0.0} and doc["draft"]["from"] == "server"
    assert len(doc["draft"]["digest"]) == 64 and doc["contract_fields"]["capture.boundaries"] == ["B_2", "B_15", "B_27"]
    edited = tmp_path / "edited.yaml"
    edited.write_text(Path(CONTRACT).read_text() + "precision:\n  serving: float32\n")
    g = serve(hist_of=_by_domain(_varied), info={**SERVER_INFO, "speculative_draft_model_path": str(second)})
    js = tmp_path / "r.json"
    rc, out, err = accept(capsys, "--server", g.url, "--contract", str(edited), "--baseline", str(b), "--json", str(js))
    assert rc == 0 and "ACCEPTANCE MET" in out, out + err
    assert "changed since the baseline: contract precision.serving: None -> float32" in " ".join(out.split()), out
    ch = json.loads(js.read_text())["meta"]["changes_from_baseline"]
    assert ch["draft.path"] == [str(first), f"{second} (same content, digest {doc['draft']['digest'][:12]})"], ch
    assert ch["contract precision.serving"] == [None, "float32"] and "draft.digest" not in ch, ch
    # a changed export is another draft: its digest is reported (and the figures judge it)
    cfg = json.loads((second / "config.json").read_text())
    (second / "config.json").write_text(json.dumps({**cfg, "rope_theta": 10000.0}))
    rc, out, err = accept(capsys, "--server", g.url, "--contract", str(edited), "--baseline", str(b))
    assert rc == 0 and "changed since the baseline: draft.digest:" in " ".join(out.split()), out + err
    # a format-1 baseline (issue 34's: no fields, no digest, no sampling) still loads and compares
    old = {k: v for k, v in doc.items() if k not in ("contract_fields", "draft", "sampling")}
    old["format"], old["tool_version"] = 1, "0.0.9"
    (tmp_path / "old.json").write_text(json.dumps(old))
    rc, out, err = accept(capsys, "--server", g.url, "--contract", str(edited), "--baseline", str(tmp_path / "old.json"))
    text = " ".join(out.split())
    assert rc == 0 and "changed since the baseline: contract_sha256:" in text and "tool_version: 0.0.9 ->" in text, \
        out + err


def test_another_model_than_the_baselines_exits_2(capsys, serve, tmp_path):
    b = _record(capsys, serve(), tmp_path)
    g = serve(info={**SERVER_INFO, "model_path": "/models/another"})
    rc, _, err = accept(capsys, "--server", g.url, "--contract", CONTRACT, "--baseline", str(b))
    assert rc == 2 and "field server.model is '/models/smollm2'" in err and "/models/another" in err, err


def test_record_refuses_to_overwrite_the_contract(capsys, serve):
    f = serve()
    rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--record", CONTRACT)
    assert rc == 2 and "refusing to overwrite" in err, err


# --- figures and the baseline rule on scripted counters --------------------------------------------

def _by_domain(good, bad_domains=(), bad=None):
    def hist_of(text):
        p = next(p for p in P.load_prompts() if p.messages[0]["content"] == text)
        return bad if p.domain in bad_domains else good(p)
    return hist_of


def _varied(p):  # per-prompt differences, so the intervals are not points
    n = int(p.id.split("-")[-1])
    return [10 + n, 4 + n % 3, 2, n % 2]


def test_the_same_server_passes_its_own_baseline_and_a_drop_fails_naming_the_positions(capsys, serve, tmp_path):
    f = serve(hist_of=_by_domain(_varied))
    b = _record(capsys, f, tmp_path)
    doc = json.loads(b.read_text())
    assert doc["server"]["draft"] == "/models/draft" and doc["server"]["flags"]["speculative_num_draft_tokens"] == 4
    assert doc["prompt_set"]["version"] == P.PROMPT_SET_VERSION and len(doc["per_prompt"]) == 8
    assert len(doc["figures"]["per_position"]) == 3
    rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--baseline", str(b))
    assert rc == 0 and "[+0.000, +0.000]" in out, out + err
    # the seed incident's shape: almost nothing accepted beyond position 1, on every prompt
    g = serve(hist_of=_by_domain(_varied, P.DOMAINS, [20, 1, 0, 0]))
    rc, out, err = accept(capsys, "--server", g.url, "--contract", CONTRACT, "--baseline", str(b),
                          "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    rep = json.loads((tmp_path / "r.json").read_text())
    failed = {x["slot"] for x in rep["findings"] if x["check"] == "accept_regression" and x["status"] == "fail"}
    assert failed == {"accept length", "position 1", "position 2", "position 3"}, failed
    assert "DROPPED" in out
    # the same comparison as one HTML page: both runs' per-position acceptance, the regression findings
    page = tmp_path / "r.html"
    rc, out, err = accept(capsys, "--server", g.url, "--contract", CONTRACT, "--baseline", str(b), "--html", str(page))
    assert rc == 1, out + err
    html = page.read_text()
    assert "accept_regression" in html and 'data-verdict="violations"' in html
    acc = rep["meta"]["acceptance"]
    assert acc["baseline"]["mean_accept_length"] == doc["figures"]["accept_length"]["value"]
    assert [p["rate"] for p in acc["per_position"]] == [p["value"] for p in rep["meta"]["figures"]["per_position"]]
    assert acc["per_position"][1]["rate"] == 0 and acc["baseline"]["per_position"][1]["rate"] > 0


def test_a_drop_on_some_prompts_within_the_noise_passes_and_the_tolerance_counts(capsys, serve, tmp_path):
    f = serve(hist_of=_by_domain(_varied))
    b = _record(capsys, f, tmp_path)
    # one domain (2 of 8 prompts) a little worse: inside the tolerance
    g = serve(hist_of=_by_domain(_varied, ("code",), [12, 4, 2, 0]))
    rc, out, err = accept(capsys, "--server", g.url, "--contract", CONTRACT, "--baseline", str(b))
    assert rc == 0, out + err
    rc, out, err = accept(capsys, "--server", g.url, "--contract", CONTRACT, "--baseline", str(b), "--tolerance", "0")
    assert "position" in out


def test_the_contract_floor_fails_a_server_that_accepts_too_little(capsys, serve):
    f = serve(hist_of=lambda t: [30, 1, 0, 0])  # 1 + ~1/31 + prefill: below smollm2's floor 1.22
    rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5")
    assert rc == 1 and "accept_length" in out and "(floor 1.22)" in " ".join(out.split()), out + err


def test_a_passing_run_prints_its_floor_and_v_lists_what_the_hint_promises(capsys, serve):
    """A fresh user read ``passed: ... (-v lists them)`` and ``accept -v`` was refused; the floor was in --json
    only. The text report names the floor it applied, and -v / --verbose lists the folded findings."""
    f = serve()
    rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5")
    flat = " ".join(out.split())
    assert rc == 0 and "(-v lists them)" in flat and "accept length gate: mean accept length" in flat, out + err
    assert "(floor 1.22): passed" in flat, out
    for flag in ("-v", "--verbose"):
        rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5", flag)
        assert rc == 0 and "PASSED AND SKIPPED" in out and "-v lists them" not in out, out + err
        assert "accept_length" in out and "draft_acceptance" in out, out


def test_markdown_and_json_are_written(capsys, serve, tmp_path):
    f = serve(hist_of=_by_domain(_varied))
    md, js = tmp_path / "s.md", tmp_path / "s.json"
    rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "8", "--markdown", str(md),
                          "--json", str(js))
    assert rc == 0, err
    text = md.read_text()
    assert "### Acceptance figures" in text and "| position 3 |" in text
    doc = json.loads(js.read_text())
    assert doc["meta"]["figures"]["prompts"] == 8 and len(doc["meta"]["per_prompt"]) == 8
    assert doc["meta"]["server"]["kind"] == "sglang"


def test_prompt_subsets_cover_every_domain_and_ids_are_unique():
    allp = P.load_prompts()
    assert len(allp) == 32 and len({p.id for p in allp}) == 32
    assert {p.domain for p in P.select(4)} == set(P.DOMAINS)
    assert [p.id for p in P.select(ids=["math-02", "chat-01"])] == ["math-02", "chat-01"]
    with pytest.raises(Exception, match="not in prompt set"):
        P.select(ids=["nope"])


# --- vLLM: per-request metrics, and /metrics counters with other traffic refused --------------------

METRICS = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} {drafts}
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} {acc}
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} {p2}
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} {done}
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 0.0
vllm:generation_tokens_total{engine="0",model_name="m"} {gen}
"""


def _metrics(**kw):
    text = METRICS
    for k, v in kw.items():
        text = text.replace("{" + k + "}", f"{float(v)}")
    return text


def test_prometheus_text_is_parsed_and_summed_over_label_sets():
    m = V.parse_metrics(_metrics(drafts=109, acc=43, p0=31, p1=10, p2=2, done=4, gen=128))
    assert V.total(m, V.DRAFTS) == 109 and V.total(m, V.PER_POS, position="1") == 10
    assert V.total(m, V.SUCCESS) == 4 and V.total(m, "vllm:absent") is None
    with pytest.raises(V.ServerError, match="line 1 is not Prometheus text"):
        V.parse_metrics("this is not { prometheus")


def _vllm_server(state, spec=None):
    def behaviour(h, path, body):
        if path == "/version":
            return h._send(200, {"version": "0.32.0"})
        if path == "/v1/models":
            return h._send(200, {"object": "list", "data": [{"id": "m", "root": "/models/smollm2"}]})
        if path == "/metrics":
            raw = _metrics(**state).encode()
            h.send_response(200)
            h.send_header("Content-Length", str(len(raw)))
            h.end_headers()
            return h.wfile.write(raw)
        if path == "/v1/chat/completions":
            state.update(drafts=state["drafts"] + 20, acc=state["acc"] + 9, p0=state["p0"] + 6, p1=state["p1"] + 2,
                         p2=state["p2"] + 1, done=state["done"] + 1 + state.get("others", 0), gen=state["gen"] + 30)
            a = {"choices": [{"message": {"content": "..."}}], "usage": {"completion_tokens": 30}}
            if spec:
                a["metrics"] = {"speculative_decoding": spec}
            return h._send(200, a)
        h._send(404, {"detail": "Not Found"})
    return Fake(behaviour)


def test_vllm_counters_are_differenced_around_each_request(capsys):
    f = _vllm_server(dict(drafts=100, acc=40, p0=30, p1=8, p2=2, done=3, gen=90))
    try:
        rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5", "--concurrency", "1",
                              "--json", "/dev/null")
    finally:
        f.close()
    assert rc == 0, out + err
    assert "vllm 0.32.0" in out and "/metrics delta" in out
    assert "1.450" in out  # vLLM's own definition: 1 + accepted / drafts = 1 + 9/20, per prompt and overall
    assert "0.300" in out and "0.100" in out and "0.050" in out  # positions 6/20, 2/20, 1/20


def test_vllm_counters_moved_by_other_traffic_are_refused(capsys):
    f = _vllm_server(dict(drafts=100, acc=40, p0=30, p1=8, p2=2, done=3, gen=90, others=1))
    try:
        rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5", "--concurrency", "1")
    finally:
        f.close()
    assert rc == 2 and "other traffic moved" in err and "request_success_total +2" in err, err


def test_vllm_per_request_metrics_need_no_counters_and_allow_concurrency(capsys):
    spec = {"mean_acceptance_length": 1.45, "draft_acceptance_rate": 0.15, "acceptance_histogram": [14, 4, 1, 1],
            "num_spec_steps": 20, "num_accepted_draft_tokens": 9, "num_draft_tokens": 60, "num_spec_tokens": 3}
    f = _vllm_server(dict(drafts=100, acc=40, p0=30, p1=8, p2=2, done=3, gen=90, others=5), spec=spec)
    try:
        rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5", "--concurrency", "4")
    finally:
        f.close()
    assert rc == 0 and "metrics.speculative_decoding" in out and "1.450" in out, out + err


def test_vllm_per_request_metrics_and_counters_must_agree_when_both_are_read(capsys):
    spec = {"acceptance_histogram": [14, 4, 1, 1], "num_spec_steps": 20, "num_accepted_draft_tokens": 9,
            "num_spec_tokens": 3}
    for hist, want in (([14, 4, 1, 1], 0), ([13, 5, 1, 1], 2)):
        f = _vllm_server(dict(drafts=100, acc=40, p0=30, p1=8, p2=2, done=3, gen=90),
                         spec={**spec, "acceptance_histogram": hist})
        try:
            rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5",
                                  "--concurrency", "1")
        finally:
            f.close()
        assert rc == want, out + err
        assert ("= /metrics delta" in out) if want == 0 else ("disagrees with the /metrics counters" in err)


def test_vllm_without_spec_decode_counters_exits_2(capsys):
    def behaviour(h, path, body):
        if path == "/version":
            return h._send(200, {"version": "0.32.0"})
        if path == "/v1/models":
            return h._send(200, {"data": [{"id": "m", "root": "/models/smollm2"}]})
        if path == "/metrics":
            raw = b"vllm:generation_tokens_total{engine=\"0\"} 5.0\n"
            h.send_response(200)
            h.send_header("Content-Length", str(len(raw)))
            h.end_headers()
            return h.wfile.write(raw)
        h._send(404, {"detail": "Not Found"})
    f = Fake(behaviour)
    try:
        rc, _, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5")
    finally:
        f.close()
    assert rc == 2 and "without speculative decoding" in err, err


# --- pytest -m conformance --conformance-server URL ----------------------------------------------------

pytest_plugins = ["pytester"]


def test_pytest_conformance_server_adds_the_server_item(pytester, serve, tmp_path):
    f = serve(hist_of=_by_domain(_varied))
    base = ["-m", "conformance", "--contract", CONTRACT, "-p", "no:cacheprovider", "-k", "server-accept",
            "--conformance-server", f.url]
    res = pytester.runpytest(*base, "--conformance-json", str(tmp_path / "ok.json"))
    res.assert_outcomes(passed=1)
    doc = json.loads((tmp_path / "ok.json").read_text())
    assert any(x["check"] == "accept_length" and x["path"] == "server" and x["status"] == "pass"
               for c in (doc if isinstance(doc, list) else [doc]) for x in c.get("findings", []))
    g = serve(hist_of=lambda t: [30, 1, 0, 0])  # below the contract's floor
    res = pytester.runpytest(*base[:-1], g.url)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*accept_length*"])
    url = f"http://127.0.0.1:{free_port()}"
    res = pytester.runpytest(*base[:-1], url)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*server-accept*cannot connect*"])


def test_the_command_exits_at_the_run_timeout_without_waiting_for_requests_in_flight(serve):
    """Requests still waiting on the server when the run ends do not keep the process alive."""
    import subprocess
    import sys
    import time

    def chat(h, body):
        time.sleep(20)
    f = serve(chat=chat)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "eagle3_conformance.cli", "accept", "--server", f.url, "--contract",
                        CONTRACT, "--prompts", "5", "--request-timeout", "60", "--run-timeout", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "did not finish within --run-timeout 1 s" in r.stderr, r.stderr
    assert time.perf_counter() - t0 < 15


def test_the_verdict_speaks_of_acceptance_met_or_not_gated_never_of_shapes(capsys, serve, tmp_path):
    """``accept`` reads no tensor: its verdict is ACCEPTANCE MET when a floor or a baseline judged the
    figures, NOT GATED (exit 0, saying why) when nothing did; never 'CONFORMS ON SHAPES ONLY'."""
    f = serve()
    page = tmp_path / "met.html"
    rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "5", "--html", str(page))
    assert rc == 0 and out.rstrip().splitlines()[-1].startswith("ACCEPTANCE MET"), out + err
    html = page.read_text()
    assert 'data-verdict="acceptance met"' in html and 'class="verdict v-good">ACCEPTANCE MET' in html
    no_floor = tmp_path / "no-floor.yaml"
    text = Path(CONTRACT).read_text()
    no_floor.write_text("\n".join("  min_accept_length:" if ln.startswith("  min_accept_length:") else ln
                                  for ln in text.splitlines()) + "\n")
    md = tmp_path / "r.md"
    rc, out, err = accept(capsys, "--server", f.url, "--contract", str(no_floor), "--prompts", "5", "--markdown", str(md))
    assert rc == 0 and "NOT GATED" in out and "gates.min_accept_length" in out, out + err
    assert "SHAPES" not in out and "NOT GATED" in md.read_text() and md.read_text().startswith("## ⚠️ NOT GATED")


def test_an_interval_straddling_the_tolerance_is_inconclusive_exit_3_with_the_prompts_that_decide_it(
        capsys, serve, tmp_path):
    """Issue 41: the 8-prompt set said ACCEPTANCE MET on a change whose interval held the drop the gate
    exists to catch. Two of four domains drop a little (three more verify steps without a draft accepted,
    one fewer with one), so the paired interval straddles -tolerance: neither a pass nor a failure, exit 3, with the prompts that
    would decide it and the smallest drop the run could detect."""
    f = serve(hist_of=_by_domain(_varied))
    b = _record(capsys, f, tmp_path)

    def worse(p):
        h = _varied(p)
        return [h[0] + 3, h[1] - 1, h[2], h[3]] if p.domain in ("code", "math") else h
    g = serve(hist_of=_by_domain(worse))
    js = tmp_path / "r.json"
    rc, out, err = accept(capsys, "--server", g.url, "--contract", CONTRACT, "--baseline", str(b), "--json", str(js))
    assert rc == 3, out + err
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("INCONCLUSIVE: accept length change [") and "prompts would decide it" in last, last
    assert "smallest drop this run could detect" in last and "ACCEPTANCE MET" not in out
    acc = next(x for x in json.loads(js.read_text())["findings"] if x["slot"] == "accept length")
    assert acc["status"] == "skip" and acc["observed"]["decision"] == "INCONCLUSIVE"
    need = acc["observed"]["units_needed"]
    assert need > 8 and f"about {need} prompts" in last
    lo, hi = acc["observed"]["change"]
    assert lo < -float(acc["expected"].split(" - ")[1]) <= hi  # the interval straddles -tolerance
    assert "smallest detectable drop: accept length" in out


def test_a_floor_is_written_from_a_good_run_and_validates_without_calibrated_bands(capsys, serve, tmp_path):
    """Issue 41: --write-floor writes a copy of the contract whose gates.min_accept_length is the lower end of
    the run's 95% interval (1 + accepted drafts per verify step, over prompts), its provenance in the comment;
    a contract with uncalibrated bands carries it; a run that failed writes none."""
    f = serve(hist_of=_by_domain(_varied))
    no_floor = tmp_path / "no-floor.yaml"
    no_floor.write_text("\n".join("  min_accept_length:" if ln.startswith("  min_accept_length:") else ln
                                  for ln in Path(CONTRACT).read_text().splitlines()) + "\n")
    out = tmp_path / "floored.yaml"
    rc, o, err = accept(capsys, "--server", f.url, "--contract", str(no_floor), "--prompts", "8", "--write-floor",
                        str(out))
    assert rc == 0 and f"floor written to {out}: gates.min_accept_length: " in o, o + err
    text = out.read_text()
    floor = float(text.split("min_accept_length: ")[1].split()[0])
    assert "accept --server" in text and "95% over 8 units" in text and "status: uncalibrated" in text
    from eagle3_conformance.acceptance.decision import floor_from_runs

    per = [(sum(h) + sum(j * c for j, c in enumerate(h)), sum(h)) for h in (_varied(p) for p in P.select(8))]
    assert floor == floor_from_runs(per)["floor"] and floor < floor_from_runs(per)["value"]
    assert main(["validate", str(out)]) == 0
    capsys.readouterr()
    rc, o, err = accept(capsys, "--server", f.url, "--contract", str(out), "--prompts", "8")
    assert rc == 0 and "ACCEPTANCE MET" in o, o + err  # the run it came from meets it
    # a run that fails writes no floor (exit 2 after its report), and never over the contract itself
    g = serve(hist_of=lambda t: [30, 1, 0, 0])
    rc, o, err = accept(capsys, "--server", g.url, "--contract", CONTRACT, "--prompts", "5", "--write-floor",
                        str(tmp_path / "bad.yaml"))
    assert rc == 2 and "not written" in err and not (tmp_path / "bad.yaml").exists(), o + err
    rc, o, err = accept(capsys, "--server", f.url, "--contract", str(out), "--prompts", "8", "--write-floor", str(out))
    assert rc == 2 and "refusing to overwrite" in err, err


def test_a_floor_is_named_by_its_measure_and_not_offered_from_counters_that_disagree(tmp_path, capsys):
    """newuser finding 15: a stub whose ``completion_tokens`` said 2 tokens per verify step while its
    correct-drafts histogram said 1 + 1.647 accepted drafts per step: ``accept`` printed ``accept length
    2.000 [2.000, 2.000]`` and "a floor from this run ... accept length 2.647", no warning. The two figures
    measure different things (the floor's leaves out SGLang's prefill token) and here they also contradicted
    each other by far more than that token and answers cut at --max-tokens explain. Now the floor line names
    its own measure, a run whose counters disagree says so and offers no floor, and --write-floor refuses.
    Expected by hand: histogram [3, 4, 6, 4]: 17 steps, 4 + 12 + 12 = 28 accepted drafts, 8 prompts."""
    def contradicting(h, body):
        doc = _answer([3, 4, 6, 4])
        doc["choices"][0]["meta_info"]["completion_tokens"] = 34  # 2 per verify step
        return h._send(200, doc)

    f = sglang(chat=contradicting)
    try:
        rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "8", "--record",
                              str(tmp_path / "b.json"), "--json", str(tmp_path / "r.json"))
        assert rc == 0, out + err
        assert "accept length  2.000  [2.000, 2.000]" in out
        assert ("warning: the server's counters disagree: its returned tokens give accept length 2.000 per verify "
                "step, its accepted drafts 1 + 1.647 = 2.647") in out
        assert "explain -16 to 8 tokens of difference, not -88" in out  # 8 prefill tokens; 8 x k=3 cut short
        assert "a floor from this run" not in out
        assert "the server's counters disagree" in json.loads((tmp_path / "r.json").read_text())["meta"][
            "counters_disagree"]
        rc, out, err = accept(capsys, "--server", f.url, "--contract", CONTRACT, "--prompts", "8", "--write-floor",
                              str(tmp_path / "floored.yaml"))
        assert rc == 2 and "not written: the server's counters disagree" in err and not (tmp_path / "floored.yaml").exists()
    finally:
        f.close()
    # consistent counters (the scripted server: completion tokens = steps + accepted drafts + the prefill token):
    # no warning, and the floor line names 1 + accepted drafts per verify step, not the accept length
    g = sglang()
    try:
        rc, out, err = accept(capsys, "--server", g.url, "--contract", CONTRACT, "--prompts", "8", "--record",
                              str(tmp_path / "b2.json"))
        assert rc == 0 and "counters disagree" not in out, out + err
        # [10, 4, 2, 1]: 17 steps, 4 + 4 + 3 = 11 accepted drafts -> 28 / 17 = 1.647; accept length 29 / 17 = 1.706
        assert "accept length  1.706" in out
        assert ("a floor from this run: gates.min_accept_length: 1.647 (the lower end of its 1 + accepted drafts "
                "per verify step, 1.647 [1.647, 1.647]: on SGLang the accept length less its prefill token") in out
    finally:
        g.close()
