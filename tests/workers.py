"""Child-process programs for the multi-process and crash tests.

Run as ``python tests/workers.py MODE ...`` with the interpreter of the virtualenv, so that
``import morphz`` loads the installed package (this folder holds no ``morphz``):

- ``multi DB CONTEXT WORKER ATTEMPTS SEED`` prints ``{"ready": WORKER}``, waits for a line on
  stdin, then makes ATTEMPTS attempts on the shared context and prints one JSON line per attempt:
  ``committed`` (tx_id, event, after_version, rebased, ...), ``refused`` (code, boundaries),
  ``observed`` (event, text) or ``error`` (anything else, which the test treats as a failure).
- ``crash DB CONTEXT RUN`` prints ``{"ready": RUN}``, then commits forever, round after round,
  and prints an acknowledgement line (flushed) after every call that returned. The parent kills
  it with SIGKILL.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

import morphz

SHARED = "shared/plan"
OBS_KINDS = ("tool_result", "recall_result", "user_message", "external_event")


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- multi


class MultiWorker:
    """One of several processes committing to one context at the same time.

    Attempt types:
    - ``observe``: append an observation (always succeeds);
    - ``derive``: a new frame of this worker's own, citing its previous frame and/or one of its
      observations, based on a version read now or earlier (never conflicts);
    - ``revise-shared``: revise the frame every worker revises, with the base version read just
      before (or, now and then, an older read: a stale reader); may be refused as a conflict;
    - ``revise-own``: revise one of this worker's frames, last changed at version V, with base
      version V while this worker has committed since; always rebased (nobody else touches it).
    """

    def __init__(self, ctx: morphz.Context, worker: int, rng: random.Random) -> None:
        self.ctx = ctx
        self.worker = worker
        self.rng = rng
        self.own: dict[str, int] = {}  # own frame id -> version that last changed it
        self.own_obs: list[str] = []
        self.latest_after = 0  # after_version of this worker's latest commit
        self.shared_read: tuple[int, int] | None = None  # (version, revision) last read

    def token(self, attempt: int) -> str:
        return f"w{self.worker}-a{attempt}"

    def commit(self, kind: str, attempt: int, text: str, **extra: Any) -> dict[str, Any]:
        record: dict[str, Any] = {"worker": self.worker, "attempt": attempt, "type": kind}
        record.update(extra)
        try:
            receipt = self.ctx.commit(text)
        except morphz.TxError as exc:
            record.update(
                status="refused",
                code=exc.code,
                message=str(exc),
                boundaries=list(exc.details.get("changed_boundaries", [])),
            )
            return record
        self.latest_after = max(self.latest_after, receipt.after_version)
        record.update(
            status="committed",
            tx_id=receipt.tx_id,
            event=receipt.event,
            seq=receipt.seq,
            base_version=receipt.base_version,
            before_version=receipt.before_version,
            after_version=receipt.after_version,
            rebased=receipt.rebased,
        )
        return record

    def observe(self, attempt: int) -> dict[str, Any]:
        kind = self.rng.choice(OBS_KINDS)
        text = f"observation {self.token(attempt)}"
        event = self.ctx.observe(kind, text)
        self.own_obs.append(event.ref)
        return {
            "worker": self.worker,
            "attempt": attempt,
            "type": "observe",
            "status": "observed",
            "event": event.ref,
            "kind": kind,
            "text": text,
        }

    def derive(self, attempt: int) -> dict[str, Any]:
        sources: list[str] = []
        if self.own:
            sources.append(self.rng.choice(sorted(self.own)))
        if self.own_obs and (not sources or self.rng.random() < 0.5):
            sources.append(self.rng.choice(self.own_obs))
        # Based on the version read now, or on this worker's last commit (possibly stale).
        base = self.ctx.version if self.rng.random() < 0.5 else self.latest_after
        fid = f"w{self.worker}/f{attempt}"
        body = f"(fact (attempt {self.token(attempt)}) (n {attempt}))"
        text = (
            f"(context-tx (base-version {base}) (derive {fid} (from {' '.join(sources)}) {body}))"
        )
        record = self.commit("derive", attempt, text, frame=fid, body=body)
        if record["status"] == "committed":
            self.own[fid] = record["after_version"]
        return record

    def revise_shared(self, attempt: int) -> dict[str, Any]:
        stale = self.shared_read is not None and self.rng.random() < 0.25
        if not stale or self.shared_read is None:
            mind = self.ctx.mind()
            frame = mind.frame(SHARED)
            assert frame is not None
            self.shared_read = (mind.version, frame.revision)
        base, revision = self.shared_read
        if self.rng.random() < 0.5:
            time.sleep(self.rng.uniform(0, 0.002))  # let other writers in
        body = f"(plan (attempt {self.token(attempt)}) (after-revision {revision}))"
        text = f"(context-tx (base-version {base}) (revise {SHARED} {body}))"
        return self.commit("revise-shared", attempt, text, body=body, stale_read=stale)

    def revise_own(self, attempt: int) -> dict[str, Any] | None:
        older = [f for f, v in self.own.items() if v < self.latest_after]
        if not older:
            return None
        fid = self.rng.choice(sorted(older))
        base = self.own[fid]
        body = f"(fact (attempt {self.token(attempt)}) (revised true))"
        text = f"(context-tx (base-version {base}) (revise {fid} {body}))"
        record = self.commit("revise-own", attempt, text, frame=fid, body=body)
        if record["status"] == "committed":
            self.own[fid] = record["after_version"]
        return record

    def attempt(self, attempt: int) -> dict[str, Any]:
        if attempt == 0 or not self.own_obs:
            return self.observe(attempt)
        roll = self.rng.random()
        if roll < 0.15:
            return self.observe(attempt)
        if roll < 0.45:
            return self.derive(attempt)
        if roll < 0.60:
            record = self.revise_own(attempt)
            if record is not None:
                return record
        return self.revise_shared(attempt)


def run_multi(path: str, context: str, worker: int, attempts: int, seed: int) -> int:
    db = morphz.open(path)
    try:
        ctx = db.context(context)
        emit({"ready": worker})
        sys.stdin.readline()  # the parent starts every worker at once
        rng = random.Random(seed * 1000 + worker)
        w = MultiWorker(ctx, worker, rng)
        for attempt in range(attempts):
            try:
                record = w.attempt(attempt)
            except Exception as exc:  # accounted for, and failed on, by the parent
                record = {
                    "worker": worker,
                    "attempt": attempt,
                    "status": "error",
                    "error": f"{type(exc).__name__}: {exc}",
                }
            emit(record)
            time.sleep(rng.uniform(0, 0.001))
    finally:
        db.close()
    return 0


# ---------------------------------------------------------------- crash


def crash_round(ctx: morphz.Context, prefix: str) -> None:
    """One round of steps touching only this round's frames, so every step is valid whatever
    earlier, interrupted rounds left behind. Assumes the context's window is 2 ticks."""
    p = prefix
    refs: dict[str, str] = {}

    def observe(kind: str, name: str) -> None:
        text = f"{p} {name}"
        event = ctx.observe(kind, text)
        refs[name] = event.ref
        emit({"op": "obs", "event": event.ref, "kind": kind, "text": text})

    def commit(ops: str, reason: str | None = None) -> None:
        why = f' (reason "{reason}")' if reason else ""
        receipt = ctx.commit(f"(context-tx (base-version {ctx.version}){why} {ops})")
        emit({"op": "tx", "tx": receipt.tx_id, "event": receipt.event, "ops": ops})

    observe("tool_result", "log")  # ticks
    a = refs["log"]
    commit(f"(create {p}/a (fact a)) (create {p}/b (fact b)) (relate {p}/a depends-on {p}/b)")
    commit(
        f"(derive {p}/a2 (from {p}/a {a}) (fact a2)) (relate {p}/a2 supersedes {p}/a) "
        f"(retire {p}/a)",
        "superseded",  # fast path: retired at once
    )
    commit(f"(restore {p}/a) (protect {p}/b) (place {p}/a2 first) (checkpoint {p}/cp)")
    observe("recall_result", "recall")  # does not tick
    commit(f"(retire {p}/a) (protect {a})", "organize")  # a: retiring, 2 ticks
    observe("user_message", "ask")  # ticks
    commit(f"(unprotect {p}/b {a}) (retire {p}/b {a}) (unrelate {p}/a depends-on {p}/b)", "done")
    observe("external_event", "event")  # ticks: a finalized by a runtime commit
    commit(
        f"(revise {p}/a2 (fact a2 v2)) (restore {a}) (drop-checkpoint {p}/cp) (checkpoint {p}/cp2)",
        "cleanup",
    )
    observe("tool_result", "result")  # ticks: b finalized
    commit(f"(create {p}/tmp (fact tmp)) (relate {p}/tmp refines {p}/a2)")
    commit(f"(rollback {p}/cp2)", "undo tmp")
    commit(f"(drop-checkpoint {p}/cp2) (restore {p}/b) (protect {p}/a2)", "keep")


def run_crash(path: str, context: str, run: int) -> int:
    db = morphz.open(path)
    ctx = db.context(context)
    emit({"ready": run})
    round_no = 0
    while True:  # until killed
        crash_round(ctx, f"k{run}/r{round_no}")
        round_no += 1


def main(argv: list[str]) -> int:
    mode, args = argv[0], argv[1:]
    if mode == "multi":
        path, context, worker, attempts, seed = args
        return run_multi(path, context, int(worker), int(attempts), int(seed))
    if mode == "crash":
        path, context, run = args
        return run_crash(path, context, int(run))
    raise SystemExit(f"unknown mode {mode!r}: use multi or crash")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
