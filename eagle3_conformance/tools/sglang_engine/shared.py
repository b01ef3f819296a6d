"""One engine start for several callers' phases (issue 42 item 4: each ``sglang.Engine`` start costs
about 30 s of CPU before its first token, most of it SGLang's own imports in three fresh interpreters).

A caller asks :func:`run_shared` for a run: an engine configuration (the pair, device, dtype, the EAGLE-3
chain, ``extra`` spec keys, the hooks' ``reference`` config, ``extra_hooks``) and its driver phases
(:func:`.driver.run_phase`: prompts with request ids, each phase with its own ``max_new_tokens``). The
first caller of a configuration starts the driver (:func:`.launch.run_engine`, recording through the
server factory, :mod:`.server_hooks`); every caller that asks for the *same* configuration (the key of
:class:`Config`: every engine argument and every hook; only the phases may differ) before that engine
is up joins it. Once the engine is up (the driver writes its ready file) the run is sealed: the phases
of every member, in the order the members asked, go to the driver (:func:`.driver.late_phases`), each
member's first phase flushing the radix cache, so no member's requests see another's cached prefixes. A
later caller starts a run of its own. Runs with other hooks or server arguments never share (another key).

Each member gets back an :class:`~.launch.EngineRun` of its own: its outputs (by request id), its phases'
timings (``wall_s``: the run's wall less the other members' phases), and a records directory holding
only its records: the draft-input records whose requests are its own, the runtime records written
between them (logits), and what describes the engine rather than a request (the factory and model
files, the draft's ``draft_model`` record) for everyone. Records are assigned by SGLang's own request
ids (``ForwardBatch.rids``), in the order each scheduler process wrote them; the members' phases never
overlap in time (one ``generate`` call after another), so every forward belongs to one member.

What the members share: the start, and its failure (an engine that does not start, or a generation
that fails in any member's phase, is every member's error: the driver stops at the first failing phase).
A member that cancels (:meth:`Handle.cancel`, :class:`.ahead.Job`) before the run is sealed has its
phases dropped; the engine's process group is killed only when every member cancelled.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

from eagle3_conformance.environment.procgroup import kill_group
from eagle3_conformance.tools.sglang_engine.launch import EngineRun, run_engine

READY = "ready"
PHASES = "phases.json"
#: runtime records that describe the engine, not a request: every member gets them
ENGINE_KINDS = ("draft_model",)

_LOCK = threading.Lock()
_OPEN: dict[str, "_Shared"] = {}  # configuration key -> the run of that configuration still taking members


@dataclass(frozen=True)
class Config:
    """An engine configuration: what :func:`.launch.run_engine` starts the engine with (phases aside)."""

    target_dir: str
    draft_dir: str
    device: str = "cpu"
    dtype: str = "float32"
    num_steps: int = 3
    num_draft_tokens: int = 4
    extra: Any = None  # more driver spec keys (engine_extra, tp_size, ...), never phases
    reference: Any = None  # the hooks' reference config (boundary hooks)
    extra_hooks: Any = None  # more forward_hooks entries (in-engine faults)
    start_timeout: float = 300
    generate_timeout: float = 300

    def key(self) -> str:
        return json.dumps([self.target_dir, self.draft_dir, self.device, self.dtype, self.num_steps,
                           self.num_draft_tokens, self.extra, self.reference, self.extra_hooks, self.start_timeout,
                           self.generate_timeout], sort_keys=True, default=str)


@dataclass
class _Member:
    name: str
    phases: list[dict[str, Any]]
    workdir: Path
    started: Optional[Callable[[Any], None]] = None
    cancelled: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    run: Optional[EngineRun] = None
    error: Optional[BaseException] = None

    @property
    def rids(self) -> set[str]:
        return {str(r) for ph in self.phases for r in ph["rids"]}

    @property
    def phase_names(self) -> set[str]:
        return {str(ph["name"]) for ph in self.phases}


class Handle:
    """What a member's ``started`` callback gets (:class:`.ahead.Job` keeps it): :meth:`poll` is the shared
    engine process's, :meth:`cancel` withdraws this member (the engine is killed when no member is left)."""

    def __init__(self, shared: "_Shared", member: _Member) -> None:
        self._shared, self._member = shared, member

    def poll(self) -> Optional[int]:
        proc = self._shared.proc
        return None if proc is None else proc.poll()

    def cancel(self) -> None:
        self._shared.cancel(self._member)


class _Shared:
    """One driver run and its members (module docstring)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.workdir = Path(tempfile.mkdtemp(prefix="sglang-shared-"))
        self.members: list[_Member] = []
        self.sealed = False
        self.proc: Any = None
        self.thread = threading.Thread(target=self._main, name="sglang-shared", daemon=True)

    def add(self, member: _Member) -> bool:
        """Take ``member`` (under ``_LOCK``); False when sealed or its request ids or phase names are taken.
        A member that joins once the engine process runs is handed its :class:`Handle` by :func:`run_shared`
        (outside the lock); the others by :meth:`_started`."""
        if self.sealed or any(m.rids & member.rids or m.phase_names & member.phase_names for m in self.members):
            return False
        self.members.append(member)
        return True

    def _main(self) -> None:
        c = self.config
        try:
            run = run_engine(c.target_dir, c.draft_dir, [], device=c.device, dtype=c.dtype, num_steps=c.num_steps,
                             num_draft_tokens=c.num_draft_tokens, start_timeout=c.start_timeout,
                             generate_timeout=c.generate_timeout, workdir=self.workdir, reference=c.reference,
                             record_kv=True, extra_hooks=c.extra_hooks, started=self._started,
                             extra={**(c.extra or {}), "ready_file": str(self.workdir / READY),
                                    "phases_file": str(self.workdir / PHASES)})
        except BaseException as e:  # noqa: BLE001 - every member's error (module docstring)
            self.seal()
            shutil.rmtree(self.workdir, ignore_errors=True)
            for m in self.members:
                m.error = e
                m.done.set()
            return
        self.seal()
        failed: Optional[Exception] = None
        try:
            parts = split_records(run.records_dir, self.members) if run.records_dir is not None else {}
        except Exception as e:  # noqa: BLE001 - every member's error: no member's records can be trusted
            parts, failed = {}, e
        for m in self.members:
            if m.cancelled:  # withdrawn: its folder is its job's to remove
                continue
            try:
                if failed is not None:
                    raise failed
                m.run = member_run(run, m, self.members, parts.get(m.name, []))
            except Exception as e:  # noqa: BLE001 - handed to the member
                m.error = e
        # removed before any member is told: a member's process may end as soon as it has its run (this is a
        # daemon thread), and the members' records are their own links
        shutil.rmtree(self.workdir, ignore_errors=True)
        for m in self.members:
            m.done.set()

    def _started(self, proc) -> None:
        with _LOCK:
            self.proc = proc
            members = list(self.members)
        if all(m.cancelled for m in members):
            kill_group(proc)
        for m in members:
            if m.started is not None:
                m.started(Handle(self, m))
        threading.Thread(target=self._watch, name="sglang-shared-ready", daemon=True).start()

    def _watch(self) -> None:
        ready = self.workdir / READY
        while not ready.exists() and self.proc.poll() is None:
            time.sleep(0.05)
        self.seal()

    def seal(self) -> None:
        """No member joins from now on; the members' phases go to the driver (once)."""
        with _LOCK:
            if self.sealed:
                return
            self.sealed = True
            if _OPEN.get(self.config.key()) is self:
                del _OPEN[self.config.key()]
            phases = [{**ph, "flush": True} if i == 0 else ph
                      for m in self.members if not m.cancelled for i, ph in enumerate(m.phases)]
        tmp = self.workdir / (PHASES + ".tmp")
        try:
            tmp.write_text(json.dumps(phases))
            os.replace(tmp, self.workdir / PHASES)  # the driver never reads half a file
        except OSError:
            pass  # the run is over (its folder removed): no driver waits for them

    def cancel(self, member: _Member) -> None:
        """``member`` withdraws: its wait ends now (an :class:`EngineRunError`); the engine is killed when
        no member is left."""
        from eagle3_conformance.tools.sglang_engine.launch import EngineRunError

        with _LOCK:
            member.cancelled = True
            last = all(m.cancelled for m in self.members)
            proc = self.proc
        if not member.done.is_set():
            member.error = EngineRunError(f"{member.name}: withdrew from the shared engine run", "")
            member.done.set()
        if last and proc is not None and proc.poll() is None:
            kill_group(proc)


def run_shared(target_dir, draft_dir, phases: list[dict[str, Any]], *, name: str, workdir: Path,
               max_new_tokens: int = 32, started: Optional[Callable[[Any], None]] = None,
               **config: Any) -> EngineRun:
    """Run ``phases`` (:func:`.driver.run_phase` dicts with ``rids``) on an engine of ``config``
    (:class:`Config`'s fields), shared with every caller that asks for the same configuration before that
    engine is up (module docstring). ``name``: this member's name (for the others' ``spec["shared_with"]``);
    ``max_new_tokens``: each phase's, unless the phase says; ``workdir``: where this member's records go
    (``workdir/records``); ``started``: called with a :class:`Handle` once the engine process runs.

    Returns:
        this member's :class:`~.launch.EngineRun` (outputs in its phases' order).

    Raises:
        EngineStartError / EngineRunError: the shared engine did not start, or a phase failed.
        ValueError: a phase without request ids.
    """
    if any(not ph.get("rids") or len(ph["rids"]) != len(ph["prompts"]) for ph in phases):
        raise ValueError("every shared phase needs one request id per prompt")
    for k in ("extra", "reference", "extra_hooks"):  # {} / [] ask for nothing, as None does
        config[k] = config.get(k) or None
    cfg = Config(str(target_dir), str(draft_dir), **config)
    member = _Member(name, [{"max_new_tokens": max_new_tokens, **ph} for ph in phases], Path(workdir), started)
    with _LOCK:
        shared = _OPEN.get(cfg.key())
        if shared is None or not shared.add(member):
            shared = _OPEN[cfg.key()] = _Shared(cfg)
            shared.add(member)
            shared.thread.start()
        running = shared.proc is not None
    if running and started is not None:
        started(Handle(shared, member))
    member.done.wait()
    if member.error is not None:
        raise member.error
    assert member.run is not None
    return member.run


def run_batch(target_dir, draft_dir, prompts: list[list[int]], *, share: str, workdir: Path,
              max_new_tokens: int = 32, started: Optional[Callable[[Any], None]] = None, **config: Any) -> EngineRun:
    """:func:`.launch.run_engine`'s one greedy batch of ``prompts`` as the one phase ``share`` (request ids
    ``<share>/<i>``) of a shared run (:func:`run_shared`): what ``observe_engine(..., share=...)`` runs."""
    phase = {"name": share, "prompts": [list(map(int, p)) for p in prompts],
             "rids": [f"{share}/{i}" for i in range(len(prompts))]}
    return run_shared(target_dir, draft_dir, [phase], name=share, workdir=workdir, max_new_tokens=max_new_tokens,
                      started=started, **config)


def split_records(records_dir: Path, members: list[_Member]) -> dict[str, list[Path]]:
    """Member name -> its record files (module docstring): per scheduler process, in the order written, a
    draft-input record goes to the member owning its request ids, a record without ids (logits) to the
    member of the record before it; :data:`ENGINE_KINDS` records and the factory/model files to every
    member.

    Raises:
        ValueError: a record whose request ids belong to no member, or to several."""
    import torch

    from eagle3_conformance.tools.sglang_engine.captures import record_files

    owner_of = {r: m.name for m in members for r in m.rids}
    files = [Path(f.name) for f in record_files(records_dir)] + [
        Path("runtime") / f.name for f in record_files(records_dir / "runtime")]
    out: dict[str, list[Path]] = {m.name: [] for m in members}
    for f in sorted(records_dir.glob("*.json")):
        for paths in out.values():
            paths.append(Path(f.name))
    last: dict[str, Optional[str]] = {}
    for rel in sorted(files, key=_order):
        rec = torch.load(records_dir / rel, weights_only=True, mmap=True)
        pid = rel.name.partition("-")[0]
        if rec.get("kind") in ENGINE_KINDS:
            for paths in out.values():
                paths.append(rel)
            continue
        owners = {owner_of.get(str(r)) for r in rec.get("rids") or []}
        if None in owners or len(owners) > 1:
            raise ValueError(f"record {rel}: request ids {rec.get('rids')} belong to no single member of the shared "
                             f"engine run ({', '.join(m.name for m in members)})")
        who = str(owners.pop() if owners else last.get(pid) or members[0].name)
        last[pid] = who
        out[who].append(rel)
    return out


def _order(rel: Path) -> tuple[int, int]:
    pid, _, n = rel.stem.partition("-")
    return (int(pid), int(n)) if pid.isdigit() and n.isdigit() else (-1, 0)


def member_run(run: EngineRun, member: _Member, members: list[_Member], files: list[Path]) -> EngineRun:
    """``member``'s part of the shared ``run``: its outputs, timings and records (module docstring)."""
    own = [o for o in run.outputs if str(o.get("rid")) in member.rids]
    others = {f"phase {n}_s" for m in members if m is not member for n in m.phase_names}
    timings = {k: v for k, v in run.timings.items() if k not in others}
    timings["wall_s"] = run.timings.get("wall_s", 0.0) - sum(v for k, v in run.timings.items() if k in others)
    timings["generate_s"] = sum(run.timings.get(f"phase {n}_s", 0.0) for n in member.phase_names)
    records = member.workdir / "records"
    if run.records_dir is not None:
        for rel in files:
            (records / rel).parent.mkdir(parents=True, exist_ok=True)
            try:  # the shared folder is removed after: a second name for the file, no copy
                os.link(run.records_dir / rel, records / rel)
            except OSError:
                shutil.copy2(run.records_dir / rel, records / rel)
        records.mkdir(parents=True, exist_ok=True)
    spec = {**run.spec, "phases": member.phases, "shared_with": [m.name for m in members if m is not member]}
    return replace(run, outputs=own, timings=timings, records_dir=records if run.records_dir is not None else None,
                   spec=spec)
