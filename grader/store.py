"""Which exercises pass, kept in a small JSON file so that it survives kernel restarts."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def path() -> Path:
    custom = os.environ.get("FA_COURSE_PROGRESS")
    return Path(custom) if custom else Path.home() / ".flash_attention_course" / "progress.json"


def load() -> dict:
    try:
        return json.loads(path().read_text())
    except (OSError, ValueError):
        return {}


def record(exercise_id: str, passed: bool, n_passed: int, n_total: int, where: str) -> None:
    data = load()
    previous = data.get(exercise_id, {})
    data[exercise_id] = {
        "passed": passed or bool(previous.get("passed")),  # a pass stays a pass; the latest attempt is shown too
        "last": f"{n_passed}/{n_total}",
        "last_passed": passed,
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "where": where,
    }
    try:
        path().parent.mkdir(parents=True, exist_ok=True)
        tmp = path().with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path())
    except OSError:
        pass  # a read-only home must not break grading


def table() -> str:
    from .exercises import EXERCISES

    data = load()
    lines = ["exercise               notebook                 status      last run"]
    for ex in EXERCISES.values():
        entry = data.get(ex.id)
        if entry is None:
            status, last = "·  not run", ""
        else:
            status = "✓  passed" if entry.get("passed") else "✗  failing"
            last = f"{entry.get('last', '')} cases, {entry.get('when', '')}, {entry.get('where', '')}"
        lines.append(f"{ex.id:<22} {ex.notebook:<24} {status:<11} {last}")
    done = sum(bool(data.get(e, {}).get("passed")) for e in EXERCISES)
    lines.append(f"\n{done}/{len(EXERCISES)} exercises passed  (stored in {path()})")
    return "\n".join(lines)
