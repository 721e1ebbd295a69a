"""Hints on request, in steps: `grader.hint("flash_attention_2d")` shows the next step of a TODO's ladder.

Each exercise's ladders live with the exercise (`Exercise.ladder` in its chapter module): per TODO, the idea, then
the math, then the shape of the code, never the line itself. Which TODO: the one named (`todo=3` for "TODO 3 ...",
or words of its label), else the one the last check stopped at (the progress file keeps it), else the first whose
ladder is not used up. The steps taken are kept in the progress file (grader.progress() shows how many), and the
shown hint carries them in the cell's output metadata, which batch grading counts (`hints` in grades.csv).
"""

from __future__ import annotations

import re

from . import attempts, exercises, store
from .messages import catalogue
from .todo_labels import todo_label

T = catalogue("hints", {
    "heading": ("Hint {step} of {steps} · {exercise} · {todo}", "提示 {step}/{steps} · {exercise} · {todo}"),
    "heading_one": ("Hint {step} of {steps} · {exercise}", "提示 {step}/{steps} · {exercise}"),
    "next": ("Still stuck? Run grader.hint({args}) again for hint {step} of {steps}.",
             "还是卡住？再运行一次 grader.hint({args})，看第 {step}/{steps} 条提示。"),
    "last": ("That was the last hint for this TODO. grader.solution({id}) shows the reference answer, explained, once "
             "you have attempted the exercise.",
             "这是这个 TODO 的最后一条提示。试做过这个练习之后，grader.solution({id}) 会给出参考答案和讲解。"),
    "others": ("Hints for the other TODOs of this exercise: {todos} (e.g. grader.hint({id}, {example})).",
               "这个练习其他 TODO 的提示：{todos}（例如 grader.hint({id}, {example})）。"),
    "stuck": ("Stuck? {call} gives a first hint for it, one step at a time.",
              "卡住了？{call} 会给出这个 TODO 的提示，一次一步。"),
    "stuck_more": ("Stuck? {call} gives the next hint ({step} of {steps}).",
                   "卡住了？{call} 给出下一条提示（第 {step}/{steps} 条）。"),
    "stuck_any": ("Stuck? {call} gives a hint, one step at a time; add which TODO you want ({todos}) for that one.",
                  "卡住了？{call} 给出提示，一次一步；想看哪个 TODO 的提示就把它加上（{todos}）。"),
    "no_ladder": ("{id} has no hints yet.", "{id} 还没有提示。"),
    "unknown_todo": ("todo={todo} is not a TODO of {id}; its TODOs are: {todos}",
                     "todo={todo} 不是 {id} 的 TODO；它的 TODO 有：{todos}"),
    "ambiguous_todo": ("todo={todo} matches several TODOs of {id}: {todos}; name one of them fully",
                       "todo={todo} 对应 {id} 的好几个 TODO：{todos}；请写出完整的名字"),
    "bad_step": ("step must be a positive whole number, got {step}", "step 必须是正整数，收到的是 {step}"),
})

#: where a hint's output records what it showed (batch grading reads it back from a submitted notebook)
METADATA_KEY = "flash_attention_course"


def _stub(key: str) -> str:
    """A ladder key (a region's label) as the learner's stub and attempts name it."""
    return key if not key or key.upper().startswith("TODO") else f"TODO: {key}"


def ordered_keys(ex: exercises.Exercise) -> list[str]:
    """The exercise's ladder keys, in the notebook's order of its TODOs where the solutions are there to say it."""
    keys = list(ex.ladder)
    try:
        order = {label: i for i, label in enumerate(attempts.todos(ex))}
    except Exception:  # noqa: BLE001 - a learner release has no solutions: the ladder's own order
        return keys
    return sorted(keys, key=lambda k: order.get(_stub(k), len(order) + keys.index(k)))


def resolve(ex: exercises.Exercise, todo: int | str | None, keys: list[str]) -> str:
    """The ladder key `todo` names (a number n: "TODO n ..."; else the label, or words of it). ValueError if none."""
    if todo is None:
        stop = store.last_stop(ex.id)
        for k in keys:
            if stop and _stub(k) == stop:
                return k
        taken = store.hints_taken(ex.id)
        return next((k for k in keys if taken.get(k, 0) < len(ex.ladder[k])), keys[0])
    listed = ", ".join(repr(k) for k in keys)
    if isinstance(todo, bool) or not isinstance(todo, (int, str)):
        raise ValueError(T("unknown_todo", todo=repr(todo), id=repr(ex.id), todos=listed))
    if isinstance(todo, int):
        found = [k for k in keys if re.search(rf"\bTODO {todo}\b", k)]
    else:
        words = todo.strip().lower()
        found = [k for k in keys if k.lower() == words] or [k for k in keys if words and words in k.lower()]
    if not found:
        raise ValueError(T("unknown_todo", todo=repr(todo), id=repr(ex.id), todos=listed))
    if len(found) > 1:
        raise ValueError(T("ambiguous_todo", todo=repr(todo), id=repr(ex.id), todos=", ".join(map(repr, found))))
    return found[0]


def hint(exercise_id: str, todo: int | str | None = None, step: int | None = None) -> None:
    """Show the next hint for one of the exercise's TODOs (or hint `step` again, once it has been shown).

    todo: 3 for "TODO 3 ...", or the label's words ("dK/dV step"); None: the TODO your last check stopped at.
    """
    ex = exercises.get(exercise_id)
    keys = ordered_keys(ex)
    if not keys:
        _show(T("no_ladder", id=exercise_id), {})
        return
    key = resolve(ex, todo, keys)
    ladder = ex.ladder[key]
    taken = store.hints_taken(ex.id).get(key, 0)
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ValueError(T("bad_step", step=repr(step)))
        n = min(step, taken + 1, len(ladder))  # never past the next one: the steps come in order
    else:
        n = min(taken + 1, len(ladder))
    store.record_hint(ex.id, key, n)
    label = todo_label(_stub(key)) if key else ""
    head = (T("heading", step=n, steps=len(ladder), exercise=ex.id, todo=label) if label
            else T("heading_one", step=n, steps=len(ladder), exercise=ex.id))
    args = repr(ex.id) + (f", {todo!r}" if todo is not None else "")
    tail = (T("next", args=args, step=n + 1, steps=len(ladder)) if n < len(ladder)
            else T("last", id=repr(ex.id)))
    others = [k for k in keys if k != key]
    lines = [head, "", str(ladder[n - 1]), "", tail]
    if others and n == 1:
        named = ", ".join(todo_label(_stub(k)) for k in others)
        lines.append(T("others", todos=named, id=repr(ex.id), example=repr(others[0])))
    _show("\n".join(lines), {"hint": {"exercise": ex.id, "todo": key, "step": n}})


def pointer(ex: exercises.Exercise, attempt: attempts.Attempt | None, wrong: bool = False) -> str | None:
    """What a failed check's report says about the hints: the call that gives the next one for the TODO the
    cases stop at (None: not an attempt, no ladder, every hint of that TODO already shown, or only TODOs that a
    later notebook teaches left). wrong: some case gave a wrong answer, which only a filled-in TODO can do, so the
    pointer names those (the one, or the list to choose from), not the first one still empty."""
    if attempt is None or not attempt.started or not ex.ladder:
        return None
    keys = ordered_keys(ex)
    if wrong:
        filled = [k for k in keys if _stub(k) not in attempt.left]
        keys = filled or keys
        key = keys[0] if len(keys) == 1 else None
    else:
        stop = attempt.stop if attempt.stop not in attempts.TAUGHT_LATER else None
        stop = stop or (attempt.now()[0] if attempt.now() else None)
        if stop is None and attempt.left:
            return None
        key = next((k for k in keys if stop and _stub(k) == stop), None)
        if key is None and len(keys) == 1:
            key = keys[0]
    if key is None:  # the output wrong and several TODOs filled in: any of them may be it
        return T("stuck_any", call=f"grader.hint({ex.id!r})", todos=", ".join(map(repr, keys)))
    n, steps = store.hints_taken(ex.id).get(key, 0), len(ex.ladder[key])
    if n >= steps:
        return None
    call = f"grader.hint({ex.id!r}" + (f", {key!r})" if len(keys) > 1 else ")")
    return T("stuck", call=call) if n == 0 else T("stuck_more", call=call, step=n + 1, steps=steps)


def _show(text: str, meta: dict) -> None:
    """Markdown in Jupyter (the hints use `code` and $math$), with the plain text for nbval and terminals."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(text)
        return
    head, _, body = text.partition("\n")
    display({"text/plain": text, "text/markdown": f"**{head}**\n{body}"}, raw=True,
            metadata={METADATA_KEY: meta} if meta else None)


def taken_in_notebook(nb: dict) -> dict[str, int]:
    """Hints shown in a saved notebook's outputs, per exercise: for each TODO the furthest step shown, summed."""
    furthest: dict[tuple[str, str], int] = {}
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) if isinstance(cell, dict) else []:
            meta = (out.get("metadata") or {}).get(METADATA_KEY) if isinstance(out, dict) else None
            shown = meta.get("hint") if isinstance(meta, dict) else None
            if not isinstance(shown, dict):
                continue
            try:
                where, step = (str(shown["exercise"]), str(shown["todo"])), int(shown["step"])
            except (KeyError, TypeError, ValueError):
                continue
            furthest[where] = max(furthest.get(where, 0), step)
    counts: dict[str, int] = {}
    for (exercise, _), step in furthest.items():
        counts[exercise] = counts.get(exercise, 0) + step
    return counts


__all__ = ["hint", "taken_in_notebook"]
