"""Morphz recall benchmarks on a synthetic history: import rate, search latency (selective and
common-word queries, with and without a 7-day window) and index rebuild rate, each beside a raw
sqlite3 FTS5 baseline built from the same corpus in the same run.

    .venv/bin/python benchmarks/recall_bench.py [--quick] [--events N] [--out FILE]

Prints one JSON document to stdout (progress goes to stderr). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import morphz
from _bench_common import finish, machine
from _bench_common import pct as _pct
from _bench_common import result as _result
from morphz.recall.documents import time_us
from morphz.recall.search import COMMON_DOCS
from morphz.recall.tokenize import FTS5_TOKENIZER, index_text, match_query, query_terms

FULL = {"events": 1_000_000, "queries": 200, "passes": 3, "file_events": 100_000}
QUICK = {**FULL, "events": 100_000, "queries": 100, "passes": 2}
SEED = 20260804
VOCABULARY = 50_000
ZIPF_S = 1.0
WORDS_PER_EVENT = (10, 40)
# Function words at the head of the Zipf ranking (index_text drops them, as in real text).
HEAD_TEXT = "the to and of a in is it that for on with was as at be this have from by"
# Domain words, each in 5-10% of events (probabilities spread evenly over that range).
DOMAIN_TEXT = (
    "deploy error service request database cluster latency config release timeout "
    "customer invoice backup network storage metrics alert session payment schedule"
)
HEAD, DOMAIN = HEAD_TEXT.split(), DOMAIN_TEXT.split()
KINDS = (("user_message", 0.6), ("tool_result", 0.3), ("external_event", 0.1))
START = datetime(2025, 1, 1, tzinfo=UTC)
YEAR = timedelta(days=365)
WINDOW = timedelta(days=7)
LIMIT = 10
CLASSES = ("selective", "rare_common", "two_common")


def log(message: str) -> None:
    print(f"[recall-bench] {message}", file=sys.stderr, flush=True)


def pct(samples_ns: list[int], q: float) -> float:
    return _pct(samples_ns, q, digits=3)


def result(
    metric: str, value: float, unit: str, baseline: float, *, target: str, met: bool
) -> dict[str, Any]:
    return _result(metric, value, unit, baseline, target=target, met=met, digits=3)


# ------------------------------------------------------------ the synthetic corpus


def pseudo_words(rng: random.Random, count: int) -> list[str]:
    """Distinct made-up words of 2-3 consonant-vowel syllables ending in 'a' or 'o': no Porter
    suffix ends in either (nor any Snowball/Porter2 one), so stemming never merges two."""
    consonants, vowels = "bdfgkmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < count:
        syllables = [rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 2))]
        words.add("".join(syllables) + rng.choice(consonants) + rng.choice("ao"))
    return sorted(words - set(DOMAIN))


class Corpus:
    """Zipf vocabulary (ranks 1..VOCABULARY, function words first) plus the domain words."""

    def __init__(self, rng: random.Random, events: int) -> None:
        self.rng, self.events = rng, events
        made_up = pseudo_words(rng, VOCABULARY - len(HEAD))
        rng.shuffle(made_up)
        self.vocab = HEAD + made_up
        weights = [1 / (rank**ZIPF_S) for rank in range(1, len(self.vocab) + 1)]
        self.cum = list(itertools.accumulate(weights))
        step = 0.05 / (len(DOMAIN) - 1)
        self.domain = [(word, 0.05 + i * step) for i, word in enumerate(DOMAIN)]
        self.kinds = [k for k, _ in KINDS]
        self.kind_cum = list(itertools.accumulate(w for _, w in KINDS))
        self.step_us = YEAR / timedelta(microseconds=1) / events

    def when(self, i: int) -> datetime:
        """Event i's time: spread evenly over the year, in seq order, jittered within its slot."""
        return START + timedelta(microseconds=int((i + self.rng.random()) * self.step_us))

    def write(self, folder: Path, file_events: int) -> list[Path]:
        """JSON Lines files of ``file_events`` observations each; returns their paths."""
        rng, paths = self.rng, []
        low, high = WORDS_PER_EVENT
        for first in range(0, self.events, file_events):
            count = min(file_events, self.events - first)
            lengths = [rng.randint(low, high) for _ in range(count)]
            picks = rng.choices(self.vocab, cum_weights=self.cum, k=sum(lengths))
            kinds = rng.choices(self.kinds, cum_weights=self.kind_cum, k=count)
            path = folder / f"history-{first // file_events:03d}.jsonl"
            with path.open("w", encoding="utf-8") as out:
                at = 0
                for j, length in enumerate(lengths):
                    words = picks[at : at + length]
                    at += length
                    for word, p in self.domain:
                        if rng.random() < p:
                            words.insert(rng.randrange(len(words) + 1), word)
                    i = first + j
                    record = {
                        "kind": kinds[j],
                        "text": " ".join(words).capitalize() + ".",
                        "time": self.when(i).isoformat(),
                        "meta": {"i": i},
                    }
                    out.write(json.dumps(record) + "\n")
            paths.append(path)
            log(f"  wrote {first + count:,} events")
        return paths


# ------------------------------------------------------------ the raw FTS5 baseline


class Raw:
    """Plain sqlite3: an events table and an FTS5 table with one column (index_text tokens,
    the Morphz tokenizer string), on its own file, with WAL and synchronous=NORMAL as Morphz."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute(
            "CREATE TABLE ev (id INTEGER PRIMARY KEY, kind TEXT, time TEXT, text TEXT, "
            "meta TEXT, time_us INTEGER NOT NULL)"
        )
        self.conn.execute("CREATE INDEX ev_time ON ev (time_us)")
        self.conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize = '{FTS5_TOKENIZER}')")

    def load(self, paths: list[Path]) -> float:
        """Import baseline: parse each file and insert its rows, one transaction per file."""
        start, seq = time.perf_counter(), 0
        for path in paths:
            rows = []
            for line in path.read_text(encoding="utf-8").splitlines():
                r, seq = json.loads(line), seq + 1
                meta = json.dumps(r["meta"])
                rows.append((seq, r["kind"], r["time"], r["text"], meta, time_us(r["time"])))
            self.conn.execute("BEGIN")
            self.conn.executemany("INSERT INTO ev VALUES (?, ?, ?, ?, ?, ?)", rows)
            self.conn.execute("COMMIT")
        return time.perf_counter() - start

    def index(self, batch: int = 5000) -> float:
        """Rebuild baseline: read the texts, index_text them, insert into FTS5, in batches."""
        start, last = time.perf_counter(), 0
        while True:
            rows = self.conn.execute(
                "SELECT id, text FROM ev WHERE id > ? ORDER BY id LIMIT ?", (last, batch)
            ).fetchall()
            if not rows:
                return time.perf_counter() - start
            self.conn.execute("BEGIN")
            self.conn.executemany(
                "INSERT INTO t (rowid, body) VALUES (?, ?)", [(i, index_text(x)) for i, x in rows]
            )
            self.conn.execute("COMMIT")
            last = rows[-1][0]

    def df(self, word: str, cap: int = COMMON_DOCS + 1) -> int:
        sql = "SELECT count(*) FROM (SELECT rowid FROM t WHERE t MATCH ? LIMIT ?)"
        return int(self.conn.execute(sql, (match_query(word), cap)).fetchone()[0])

    def search(self, match: str, window: tuple[int, int] | None, by_rowid: bool) -> int:
        """Top LIMIT rowids by bm25; returns the count. A window filters through a join on
        ev.time_us, or (``by_rowid``) through the rowid range its times map to."""
        if window is None:
            sql, args = "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?", (match,)
        elif by_rowid:
            low, high = self.conn.execute(
                "SELECT (SELECT id FROM ev WHERE time_us >= ? ORDER BY time_us LIMIT 1), "
                "(SELECT id FROM ev WHERE time_us < ? ORDER BY time_us DESC LIMIT 1)",
                window,
            ).fetchone()
            sql = "SELECT rowid FROM t WHERE t MATCH ? AND rowid BETWEEN ? AND ? "
            sql += "ORDER BY bm25(t) LIMIT ?"
            args = (match, low or 0, high or 0)
        else:
            sql = (
                "SELECT t.rowid FROM t JOIN ev ON ev.id = t.rowid WHERE t MATCH ? "
                "AND ev.time_us >= ? AND ev.time_us < ? ORDER BY bm25(t) LIMIT ?"
            )
            args = (match, *window)
        return len(self.conn.execute(sql, (*args, LIMIT)).fetchall())


# ------------------------------------------------------------ queries and timing


def same_match(morphz_db: Path, table: str, queries: list[str]) -> dict[str, str]:
    """The expression Morphz's search builds for each query (src/morphz/recall/search.py):
    terms in more than COMMON_DOCS documents of its index (either column) are dropped while a
    rarer one remains, the rest OR-ed; all terms AND-ed when every one is common (Morphz requires
    them in its ``body`` column, the only column of the raw table)."""
    conn = sqlite3.connect(f"file:{morphz_db}?mode=ro", uri=True)
    sql = f"SELECT count(*) FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT ?)"
    cap, out = COMMON_DOCS + 1, {}
    for query in queries:
        quoted = [f'"{t}"' for t in query_terms(query)]
        rare = [q for q in quoted if conn.execute(sql, (q, cap)).fetchone()[0] < cap]
        out[query] = " OR ".join(rare) if rare else " AND ".join(quoted)
    conn.close()
    return out


def make_queries(corpus: Corpus, cls: str, n: int) -> list[str]:
    """Up to ``n`` distinct queries of one class. Rare words come from the Zipf tail (ranks
    past 40% of the vocabulary); common words are the domain words."""
    rng, tail = corpus.rng, corpus.vocab[int(0.4 * len(corpus.vocab)) :]
    most = len(DOMAIN) * (len(DOMAIN) - 1) // 2 if cls == "two_common" else n
    out: set[str] = set()
    while len(out) < min(n, most):
        rare, common = rng.sample(tail, 2), rng.sample(DOMAIN, 2)
        pair = {"selective": rare, "rare_common": [rare[0], common[0]], "two_common": common}[cls]
        out.add(" ".join(sorted(pair, key=lambda _: rng.random())))
    return sorted(out)


Window = tuple[datetime, datetime] | None


def measure(
    ctx: morphz.Context, raw: Raw, queries: dict[str, Window], matches: dict[str, str], passes: int
) -> dict[str, tuple[list[int], list[int], float]]:
    """Morphz and the raw variants on the same queries and windows: one untimed warm-up pass,
    then ``passes`` timed ones; within a pass every variant runs each query in turn, so drift
    in machine load hits them alike. Returns name -> (wall ns, thread CPU ns, mean hits)."""

    def ours(q: str) -> int:
        w = queries[q]
        since, until = (w[0].isoformat(), w[1].isoformat()) if w else (None, None)
        return len(ctx.recall.search(q, since=since, until=until, limit=LIMIT).hits)

    def theirs(q: str, match: str, by_rowid: bool = False) -> int:
        w = queries[q]
        span = (time_us(w[0].isoformat()), time_us(w[1].isoformat())) if w else None
        return raw.search(match, span, by_rowid)

    variants: dict[str, Callable[[str], int]] = {
        "morphz": ours,
        "raw": lambda q: theirs(q, matches[q]),
    }
    if any(matches[q] != match_query(q) for q in queries):  # without common-word pruning
        variants["raw_or_all_terms"] = lambda q: theirs(q, match_query(q) or "")
    if any(queries.values()):
        variants["raw_rowid_range"] = lambda q: theirs(q, matches[q], True)
    hits = {k: sum(map(f, queries)) / len(queries) for k, f in variants.items()}
    wall: dict[str, list[int]] = {k: [] for k in variants}
    cpu: dict[str, list[int]] = {k: [] for k in variants}
    for _ in range(passes):
        for q in queries:
            for k, f in variants.items():
                start, cpu_start = time.perf_counter_ns(), time.thread_time_ns()
                f(q)
                cpu[k].append(time.thread_time_ns() - cpu_start)
                wall[k].append(time.perf_counter_ns() - start)
    return {k: (wall[k], cpu[k], hits[k]) for k in variants}


def bench_search(
    ctx: morphz.Context, corpus: Corpus, raw: Raw, cfg: dict[str, Any], db_path: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    results, details = [], {}
    table = ctx.recall_index.inspect().table or ""
    span_us = (YEAR - WINDOW) // timedelta(microseconds=1)
    for cls in CLASSES:
        words = make_queries(corpus, cls, cfg["queries"])
        matches = same_match(db_path, table, words)
        for windowed in (False, True):
            name = f"{cls}_7day_window" if windowed else cls
            log(f"search: {name}, {len(words)} queries x {cfg['passes']} passes")
            queries: dict[str, Window] = {}
            for q in words:
                since = START + timedelta(microseconds=corpus.rng.randrange(span_us))
                queries[q] = (since, since + WINDOW) if windowed else None
            timed = measure(ctx, raw, queries, matches, cfg["passes"])
            (ours, ours_cpu, _), (base, base_cpu, _) = timed["morphz"], timed["raw"]
            limits = {"p50": 3.0, "p95": 10.0} if cls == "selective" else {"p95": 50.0}
            for stat, q in (("p50", 0.5), ("p95", 0.95)):
                value, limit = pct(ours, q), limits.get(stat)
                target, met = (f"<= {limit}", value <= limit) if limit else ("-", True)
                metric = f"search_{name}_{stat}"
                results.append(result(metric, value, "ms", pct(base, q), target=target, met=met))
                results[-1] |= {"cpu": pct(ours_cpu, q), "baseline_cpu": pct(base_cpu, q)}
                results[-1] |= {"n": len(ours), "queries": len(words)}
            details[name] = {
                "loadavg_1min": round(os.getloadavg()[0], 2),
                "example_queries": words[:3],
                "example_raw_match": [matches[q] for q in words[:3]],
                "mean_hits": {k: round(h, 2) for k, (_, _, h) in timed.items()},
                "p50_p95_max_ms": {
                    k: [pct(w, 0.5), pct(w, 0.95), pct(w, 1)] for k, (w, _, _) in timed.items()
                },
                "cpu_p50_p95_ms": {
                    k: [pct(c, 0.5), pct(c, 0.95)] for k, (_, c, _) in timed.items()
                },
            }
    return results, details


def word_frequencies(raw: Raw, corpus: Corpus, events: int) -> dict[str, Any]:
    """Document frequencies (raw body column) of the word sets the queries draw from."""
    tail = corpus.vocab[int(0.4 * len(corpus.vocab)) :]
    rare = sorted(raw.df(w, events) for w in corpus.rng.sample(tail, 50))
    domain = sorted(raw.df(w, events) for w in DOMAIN)
    top = raw.df(corpus.vocab[len(HEAD)], events)  # the most frequent indexed word
    return {
        "rare_word_docs_min_median_max": [rare[0], rare[len(rare) // 2], rare[-1]],
        "domain_word_share_min_max": [round(domain[0] / events, 3), round(domain[-1] / events, 3)],
        "top_word_share": round(top / events, 3),
    }


# ------------------------------------------------------------ driver


def rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run(tmp: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    events, corpus = cfg["events"], Corpus(random.Random(SEED), cfg["events"])
    log(f"writing {events:,} synthetic events as JSON Lines")
    paths = corpus.write(tmp, cfg["file_events"])
    log("importing through Context.import_history, one file (and session) at a time")
    db = morphz.open(tmp / "morphz.db")
    ctx = db.context("bench", create=True)
    per_file, start, cpu = [], time.perf_counter(), time.process_time()
    for k, path in enumerate(paths):
        done = ctx.import_history(path, session=f"s{k:03d}")
        per_file.append(round(done.observations / done.seconds))
        log(f"  imported through {done.last_ref}: {per_file[-1]:,} observations/s")
    import_s, import_cpu = time.perf_counter() - start, time.process_time() - cpu
    details: dict[str, Any] = {"peak_rss_mb_after_import": rss_mb()}
    details["index_after_import"] = ctx.recall_index.inspect().to_dict()
    log("raw baseline: loading the same files, then indexing them into plain FTS5")
    raw = Raw(tmp / "raw.db")
    raw_load_s, raw_index_s = raw.load(paths), raw.index()
    details["corpus"] = word_frequencies(raw, corpus, events) | {
        "events": events,
        "files": len(paths),
        "jsonl_mb": round(sum(p.stat().st_size for p in paths) / 2**20, 1),
    }
    log(f"corpus: {details['corpus']}")
    rate, base = events / import_s, events / raw_load_s
    results = [result("import_rate", rate, "obs/s", base, target=">= 10000", met=rate >= 1e4)]
    results[-1] |= {"seconds": round(import_s, 1), "cpu_rate": round(events / import_cpu)}
    results[-1]["per_file"] = per_file
    search_results, details["search"] = bench_search(ctx, corpus, raw, cfg, tmp / "morphz.db")
    results += search_results
    log("rebuilding the recall index")
    start, cpu = time.perf_counter(), time.process_time()
    report = ctx.recall_index.rebuild()
    rebuild_s, rebuild_cpu = time.perf_counter() - start, time.process_time() - cpu
    docs = report.event_documents + report.frame_documents
    rate, base = docs / rebuild_s, events / raw_index_s
    results.append(result("rebuild_rate", rate, "docs/s", base, target=">= 20000", met=rate >= 2e4))
    results[-1] |= {"seconds": round(rebuild_s, 1), "cpu_rate": round(docs / rebuild_cpu)}
    results[-1] |= {"documents": docs, "current_after": report.current}
    for name in ("morphz", "raw"):
        size = sum(p.stat().st_size for p in tmp.glob(f"{name}.db*"))
        details[f"{name}_db_mb"] = round(size / 2**20, 1)
    db.close()
    raw.conn.close()
    details |= {
        "raw_load_seconds": round(raw_load_s, 1),
        "raw_index_seconds": round(raw_index_s, 1),
    }
    return {"results": results, "details": details | {"peak_rss_mb_at_end": rss_mb()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events, fewer queries")
    parser.add_argument("--events", type=int, help="corpus size (default 1,000,000)")
    parser.add_argument("--out", type=Path, help="also write the JSON document to this file")
    args = parser.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.events:
        cfg["events"] = args.events
    started = time.perf_counter()
    doc: dict[str, Any] = {
        "benchmark": "morphz-recall",
        "mode": "quick" if args.quick else "full",
        "machine": machine(),
        "config": cfg
        | {"seed": SEED, "vocabulary": VOCABULARY, "zipf_s": ZIPF_S, "domain_words": len(DOMAIN)},
    }
    with tempfile.TemporaryDirectory(prefix="morphz-recall-bench-") as tmp:
        doc |= run(Path(tmp), cfg)
    return finish(doc, started, args.out, log)


if __name__ == "__main__":
    raise SystemExit(main())
