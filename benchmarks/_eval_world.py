"""The synthetic world of the real-model evaluations: planted facts (``remember: the KEY is
VALUE``, or a ``note:`` line inside tool output), updates of their values, filler (logs, tool
output, chat) and the questions asked about them, all generated deterministically from a seed;
and how answers are scored."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from morphz.observe import Observation

# --------------------------------------------------------------------------- the world


def words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ADJECTIVES = words(
    "amber azure brisk cobalt crimson dusky ember frosty gilded hollow indigo jade keen lunar "
    "mossy nimble ochre pale quiet russet silver tawny umber velvet woven young zesty bold "
    "copper misty"
)
NOUNS = words(
    "falcon heron otter lynx badger raven marten ibis walrus bison gecko orca puffin viper "
    "yak zebra condor dingo ferret jackal koala lemur newt osprey quokka stoat tapir wombat "
    "egret mole"
)
KEYS = (
    "release codename",
    "staging database host",
    "on-call pager alias",
    "payments API key label",
    "checkout feature flag",
    "backup bucket",
    "incident ticket",
    "deploy freeze tag",
    "primary region alias",
    "cache cluster name",
    "VPN profile",
    "audit log channel",
    "load test scenario",
    "canary cohort",
    "migration batch id",
    "support rotation name",
    "search index alias",
    "billing sandbox account",
    "metrics namespace",
    "hotfix branch",
)
SERVICES = words("checkout payments search gateway billing inventory auth notifier")
PEOPLE = words("Ana Bo Chen Dara Eli Femi Gus Hana Ivo Jun")
VALUE_SHAPE = r"[a-z]+-[a-z]+-\d{3}"
FACT = re.compile(
    rf"\b(?:remember|note|update): the (?P<key>[A-Za-z0-9][A-Za-z0-9 -]*?) is "
    rf"(?:now )?(?P<value>{VALUE_SHAPE})\b"
)
CURRENT_Q = re.compile(r"what is the current (?P<key>[A-Za-z0-9][A-Za-z0-9 -]*?)\?")
HISTORY_Q = re.compile(r"which values has the (?P<key>[A-Za-z0-9][A-Za-z0-9 -]*?) had")


def slug(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")


class Values:
    """Distinct values of the shape ``adjective-noun-NNN``, none of them repeated."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def new(self) -> str:
        while True:
            value = (
                f"{self.rng.choice(ADJECTIVES)}-{self.rng.choice(NOUNS)}-"
                f"{self.rng.randint(100, 999)}"
            )
            if value not in self.used:
                self.used.add(value)
                return value


def fact_observation(rng: random.Random, key: str, value: str) -> Observation:
    """A planted fact as a user's request to remember it, or inside a tool's output."""
    service = rng.choice(SERVICES)
    if rng.random() < 0.5:
        person = rng.choice(PEOPLE)
        text = (
            f"{person}: before I forget, remember: the {key} is {value}. "
            f"We will need it when we touch {service} again."
        )
        return Observation("user_message", text)
    lines = [
        f"$ morphz-ops describe {service}",
        f"service: {service}",
        f"replicas: {rng.randint(2, 9)}",
        f"image: registry.local/{service}:{rng.randint(100, 999)}",
        f"note: the {key} is {value}",
        f"last deploy: {rng.randint(1, 28)} days ago by {rng.choice(PEOPLE)}",
    ]
    return Observation("tool_result", "\n".join(lines))


def update_observation(rng: random.Random, key: str, value: str) -> Observation:
    person = rng.choice(PEOPLE)
    text = f"change notice from {person}: update: the {key} is now {value} (effective at once)."
    return Observation("external_event", text)


def filler_observation(rng: random.Random) -> Observation:
    """Routine material with nothing to keep: a log burst, a tool listing or chat."""
    service = rng.choice(SERVICES)
    roll = rng.random()
    if roll < 0.45:
        lines = [
            f"[{service}] worker {rng.randint(1, 16)} handled batch {rng.randint(1000, 9999)} "
            f"in {rng.randint(3, 900)} ms, queue depth {rng.randint(0, 300)}, status ok"
            for _ in range(rng.randint(2, 4))
        ]
        return Observation("external_event", "\n".join(lines))
    if roll < 0.8:
        rows = [
            f"{service}-{rng.randint(1000, 9999)}  Running  restarts={rng.randint(0, 3)}  "
            f"cpu={rng.randint(5, 95)}%  mem={rng.randint(100, 900)}Mi"
            for _ in range(rng.randint(3, 6))
        ]
        return Observation("tool_result", f"$ morphz-ops pods {service}\n" + "\n".join(rows))
    person = rng.choice(PEOPLE)
    text = (
        f"{person}: the {service} dashboard looked slow this morning, around "
        f"{rng.randint(7, 11)}:{rng.randint(10, 59)}; probably the usual cache warm-up, "
        "nothing to do unless it happens again."
    )
    return Observation("user_message", text)


def batch_question(number: int, total: int) -> str:
    return (
        f"Batch {number} of {total} of the project history has arrived in your inbox. Keep "
        "working: keep in your mind, as frames, every fact you may be asked about later (what "
        "people asked you to remember, values from notes and change notices, with their latest "
        "value), and keep your context within its budget by retiring what you have processed. "
        "Reply briefly when you are done."
    )


def current_question(key: str) -> str:
    return (
        f"Question: what is the current {key}? Answer with the value, from your mind "
        "(use recall if it is no longer in view)."
    )


def history_question(key: str) -> str:
    return (
        f"Question: which values has the {key} had, oldest first? List every value it has had "
        "in order, from your mind (use recall if needed)."
    )


def answered(reply: str | None, value: str) -> bool:
    return reply is not None and value.lower() in reply.lower()


def history_answered(reply: str | None, values: Sequence[str]) -> bool:
    """Every value appears in the reply, in chronological order."""
    if reply is None:
        return False
    text = reply.lower()
    positions = [text.find(v.lower()) for v in values]
    return all(p >= 0 for p in positions) and positions == sorted(positions)
