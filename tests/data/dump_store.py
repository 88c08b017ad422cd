"""Write a Morphz SQLite store as a SQL text script that rebuilds it (the upgrade test's fixture
is kept as text, not as a database file).

    python tests/data/dump_store.py STORE.db > tests/data/store-NNNN.sql

``sqlite3.Connection.iterdump`` cannot replay an FTS5 table (it writes its shadow tables through
``writable_schema``), so the recall tables are dumped as their ``CREATE VIRTUAL TABLE`` and one
``INSERT`` per document instead; FTS5 rebuilds its shadow tables from those.
"""

from __future__ import annotations

import re
import sqlite3
import sys


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def dump(path: str) -> str:
    conn = sqlite3.connect(path)
    try:
        virtual = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%' ORDER BY 1"
            )
        ]
        shadow = re.compile("|".join(re.escape(n) + r"(_\w+)?" for n in virtual) or "(?!)")
        lines = []
        for line in conn.iterdump():
            named = re.match(r"(?:CREATE TABLE|INSERT INTO) [\"']?(\w+)[\"']?", line)
            if line.startswith(("PRAGMA writable_schema", "INSERT INTO sqlite_master")):
                continue
            if named and shadow.fullmatch(named.group(1)):
                continue
            lines.append(line)
        if lines.pop() != "COMMIT;":
            raise SystemExit("unexpected dump: it does not end with COMMIT")
        for name in virtual:
            (sql,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = ?", (name,)
            ).fetchone()
            lines.append(f"{sql};")
            for row in conn.execute(f"SELECT rowid, body, near FROM {name} ORDER BY rowid"):
                values = ", ".join(_literal(v) for v in row)
                lines.append(f"INSERT INTO {name}(rowid, body, near) VALUES ({values});")
        lines.append("COMMIT;")
        return "\n".join(lines) + "\n"
    finally:
        conn.close()


if __name__ == "__main__":
    sys.stdout.write(dump(sys.argv[1]))
