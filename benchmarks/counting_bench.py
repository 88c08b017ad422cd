"""Morphz exact token counting: what counting each request with a tokenizer costs per step of a
long tool loop, remembering each line's count (the runtime's ``PieceCounter``) against counting
every request whole, the baseline, on the same texts in the same run.

    .venv/bin/python benchmarks/counting_bench.py [--out FILE]

The requests are those of the encoding benchmark's 300-step pressure trajectory
(benchmarks/encoding_bench.py). Per step the runtime counts the compiled encoding and the tool
schemas (the pressure figure), then, with ContextDelta, the request it sends and the schemas
again; both counters count exactly those four texts, and must agree to the token. The tokenizer
is the real tiktoken under o200k_base's pre-tokenizer pattern with a stand-in vocabulary (every
byte, and the words of the protocol and the trajectory reachable by merges): the real
o200k_base file is fetched from the network, which this machine has not. Prints one JSON
document to stdout (progress goes to stderr). See docs/benchmarks.md.

It also times the estimate (no tokenizer) of the same texts with one accented character added
to each: the runtime's ``estimate_tokens`` (per line of the encoding, the larger of what its
characters cost, counted on the UTF-8 bytes, and its pre-tokenizer chunks, counted with bytes
operations, each line's figure remembered) against, as the baseline, the plain way: per line,
a loop over every character and the chunks o200k's pattern cuts (the ``regex`` module). The
estimate must never be below the baseline (its chunk count errs on the high side).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import regex
import tiktoken

import encoding_bench as eb
from _bench_common import finish, machine, pct
from morphz.encoding import Encoding
from morphz.encoding.protocol import PROTOCOL
from morphz.encoding.tokens import O200K_PATTERN, PieceCounter, estimate_tokens
from morphz.token_estimate import pieces


def log(message: str) -> None:
    print(f"[counting-bench] {message}", file=sys.stderr, flush=True)


def stand_in_encoding() -> Any:
    """Every byte, then each word of the protocol and of the trajectory's texts, bare and after
    a space, built up by merges of its prefixes (so BPE reaches it), then some punctuation."""
    ranks = {bytes([i]): i for i in range(256)}
    words = sorted(set(re.findall(r"[A-Za-z]+", PROTOCOL)) | set(eb.WORDS))
    for word in words:
        for end in range(2, len(word) + 1):
            ranks.setdefault(word[:end].encode(), len(ranks))
        for end in range(1, len(word) + 1):
            ranks.setdefault(b" " + word[:end].encode(), len(ranks))
    for glue in (")\n", "))", " (", "))\n", ")))", "@e", " @e", '"', ' "', "/", ": "):
        ranks.setdefault(glue[:2].encode(), len(ranks))
        ranks.setdefault(glue.encode(), len(ranks))
    return tiktoken.Encoding("stand-in", pat_str=O200K_PATTERN, mergeable_ranks=ranks,
                             special_tokens={})  # fmt: skip


def per_character_estimate(text: str) -> int:
    """The estimate's rule the plain way: per line of the encoding (tokens.pieces), the larger
    of its characters' cost, in a loop over them, and a token for each chunk o200k's pattern
    cuts it into."""
    units = 0
    for piece in pieces(text):
        chars = 0
        for char in piece:
            if char.isascii():
                chars += 3
            elif ord(char) > 0x2E7F:
                chars += 12
            else:
                chars += 4 * len(char.encode("utf-8", "surrogatepass"))
        units += max(chars, 12 * len(regex.findall(O200K_PATTERN, piece)))
    return -(-units // 12)


Counters = dict[str, Callable[[str], int]]


class Timer:
    """Counts each step's texts with both counters of a pair, in alternating order, and keeps
    the times; the exact pair must agree, and the estimate must not be below the plain count."""

    def __init__(self, encoding: Any, schemas: str) -> None:
        self.encode, self.schemas = encoding.encode_ordinary, schemas
        self.exact: Counters = {
            "pieces": PieceCounter(self.encode, cuts=True),
            "whole": lambda text: len(self.encode(text)),
        }
        self.estimate: Counters = {"estimate": estimate_tokens, "loop": per_character_estimate}
        self.times: dict[str, list[int]] = {name: [] for name in [*self.exact, *self.estimate]}
        self.tokens, self.chars = 0, 0

    def __call__(self, encoding: Encoding, request: str) -> None:
        texts = (encoding.text, self.schemas, request, self.schemas)
        self.tokens += self.time(self.exact, texts)
        self.chars += sum(len(text) for text in texts)
        self.time(self.estimate, tuple(f"{text}é" for text in texts))

    def time(self, counters: Counters, texts: tuple[str, ...]) -> int:
        order = list(counters) if len(self.times["whole"]) % 2 else list(counters)[::-1]
        counts = {}
        for name in order:
            start = time.perf_counter_ns()
            counts[name] = sum(counters[name](text) for text in texts)
            self.times[name].append(time.perf_counter_ns() - start)
        if counters is self.exact and len(set(counts.values())) != 1:
            raise AssertionError(f"the counters disagree: {counts}")
        if counters is self.estimate and counts["estimate"] < counts["loop"]:
            raise AssertionError(f"the estimate is below the plain count: {counts}")
        return counts[order[0]]


def result(timer: Timer, metric: str, name: str, baseline: str) -> dict[str, Any]:
    times, base = timer.times[name], timer.times[baseline]
    return eb.entry(metric, pct(times, 0.5), "ms", pct(base, 0.5), target="-", met=None) | {
        "p95": pct(times, 0.95), "baseline_p95": pct(base, 0.95),
        "first_step": round(times[0] / 1e6, 3), "n": len(times),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the JSON document to this file")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    doc: dict[str, Any] = {"benchmark": "morphz-counting", "machine": machine()}
    encoding = stand_in_encoding()
    timer = Timer(encoding, eb.tool_schemas())
    with tempfile.TemporaryDirectory(prefix="morphz-counting-bench-") as folder:
        _, details = eb.bench_prefix(Path(folder), "pressure", on_request=timer)
    steps = len(timer.times["whole"])
    doc["results"] = [
        result(timer, "exact_count_ms_per_step_p50", "pieces", "whole"),
        result(timer, "estimate_ms_per_step_p50_non_ascii", "estimate", "loop"),
    ]
    doc["details"] = {
        "tokenizer": f"tiktoken {tiktoken.__version__}, o200k_base pattern, stand-in vocabulary "
        f"of {encoding.n_vocab} tokens",
        "texts_per_step": 4,
        "mean_chars_per_step": round(timer.chars / steps),
        "mean_tokens_per_step": round(timer.tokens / steps),
        "compile_ms_p50_p95": details["compile_ms_p50_p95"],
        "baseline": "the same texts counted whole with encode_ordinary, in the same steps",
    }
    return finish(doc, started, args.out, log)


if __name__ == "__main__":
    sys.exit(main())
