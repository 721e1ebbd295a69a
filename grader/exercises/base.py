"""What every exercise is made of: typed cases, a judge, hints and bug models. Knows no exercise by name.

An exercise is an `Exercise` object in its chapter's module. It says how it is called (`signature`), which cases
grade it (`case_builders`: one builder per case, each drawing fresh random inputs from the run's generator), how
an output is judged (`judge`), what to say when only the cases with some tag fail (`hints`) and which classic
mistakes to simulate when an output is wrong (`diagnose`). checking.py runs that generically.

Every text a learner reads comes from its module's message catalogue (grader/messages.py), in English and
Chinese: the title (a `T.later(...)` Text), the hints by tag (`hint_texts`, Texts too: `hints` renders them in the
language in force), the bug models (built at check time, so `T(...)` directly) and the problems a judge appends.
Case names stay English (code and tests select cases by them): each module keeps them in a catalogue of their own
and takes them with `case_namer(...)`, which registers their Chinese names for the reports (messages.case_label).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import diagnosis
from ..diagnosis import BugModel  # noqa: F401 - the chapters take it from here (it lives with its diagnosis)
from ..environment import Environment
from ..messages import CATALOGUE, Text, case_names, catalogue, fields
from ..safety import ForbiddenCall, Guarded, RecordCalls, forbidden_message, guarded_copy, inverse_perm
from ..tolerances import tolerance

T = catalogue("exercises.base", {
    "output": ("output", "输出"),
    "not_tensor": ("{label}: expected a torch.Tensor, got {got}", "{label}：应为 torch.Tensor，实际得到 {got}"),
    "not_tensor_none": ("{label}: expected a torch.Tensor, got {got} (did you forget to return it?)",
                        "{label}：应为 torch.Tensor，实际得到 {got}（是不是忘了 return？）"),
    "wrong_shape": ("{label}: wrong shape {got}, expected {want}", "{label}：形状 {got} 不对，应为 {want}"),
    "wrong_device": ("{label}: on device '{got}', expected '{want}' (the inputs' device)",
                     "{label}：在设备 '{got}' 上，应在 '{want}' 上（即输入所在的设备）"),
    "wrong_dtype": ("{label}: dtype {got}, expected {want} (return the input's dtype)",
                    "{label}：数据类型是 {got}，应为 {want}（返回与输入相同的 dtype）"),
    "nonfinite": ("{label}: {n} {kind} value(s) where the answer is finite",
                  "{label}：有 {n} 个 {kind}，而这些位置的正确答案是有限值"),
    "nonfinite_at": ("{label}: {n} {kind} value(s) where the answer is finite ({spots})",
                     "{label}：有 {n} 个 {kind}，而这些位置的正确答案是有限值（{spots}）"),
    "outside_tolerance": ("{label}: {n} of {total} elements outside the tolerance",
                          "{label}：{total} 个元素中有 {n} 个超出容差"),
    "mismatches_only_in": ("mismatches only in {spots}", "不匹配只出现在{spots}"),
    "list_sep": ("; ", "；"),
    "nonfinite_guarded": ("the grader surrounds the inputs with NaN-filled guard regions and fills tensors you "
                          "allocate with torch.empty with NaN, so NaN in the output means a load past the end of a "
                          "tensor without a mask, or output elements that were never written; otherwise look for "
                          "-inf − (-inf) or 0/0",
                          "grader 在输入周围放了填满 NaN 的保护区，并把你用 torch.empty 分配的张量也填成 NaN，"
                          "所以输出里的 NaN 说明有 load 没带 mask、读过了张量末尾，或者有输出元素从没被写过；"
                          "如果都不是，就找找 -inf − (-inf) 或 0/0"),
    "nonfinite_plain": ("look for -inf − (-inf) (a fully masked row or an empty state) or 0/0",
                        "找找 -inf − (-inf)（整行都被 mask 掉，或状态为空）或 0/0"),
    "axis_rows": ("rows", "行"),
    "axis_columns": ("columns", "列"),
    "axis_elements": ("elements", "元素"),
    "axis_dim": ("dim {i}", "第 {i} 维"),
})

#: a case builder: draws the case's inputs from the generator (called lazily, in order, once per run)
CaseBuilder = Callable[[torch.Generator], "Case"]


@dataclass
class Case:
    """One call of the learner's function and what the answer is. Chapters subclass it with what they need."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expected: Any = None  # fp64 tensor(s) or plain Python values
    dtype: torch.dtype | None = None  # the dtype the output must have (and whose tolerance applies)
    shapes: str = ""
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # checked for in-place modification
    guards: list[Guarded] = field(default_factory=list)
    tags: frozenset[str] = frozenset()
    #: the call must raise this exception type (argument validation) instead of returning
    raises: type[Exception] | None = None
    #: ... with a message that contains one of these words (the argument it is about)
    mentions: tuple[str, ...] = ()
    #: tensors the exercise's `invoke` needs besides the arguments (never the answer: a submission graded in a
    #: child process receives args, kwargs and these, nothing else of the case)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    #: the order the interpreter runs the grid's programs in: last to first, so that a store that spills into the
    #: next program's elements is not hidden by that program writing them again afterwards (a GPU runs any order)
    program_order: str = "reverse"
    #: a case batch grading leaves out: its tensors are views of storages far larger than themselves (offsets past
    #: 2**31), which a child process could neither receive (torch.save sends whole storages) nor map under its
    #: address-space limit
    in_process_only: bool = False

    def call_args(self) -> tuple[tuple, dict]:
        return self.args, self.kwargs


def output_label() -> str:
    """How a judge calls the learner's output in a problem ("output: wrong shape ...")."""
    return T("output")


def case_namer(cases: Callable[..., str]) -> Callable[..., str]:
    """name(key, **values): the English name of a case from the case-name catalogue `cases` (code and tests select
    cases by it), with its Chinese name registered for the reports. Names without placeholders are registered now,
    the others when they are made."""
    prefix = f"{cases.namespace}."  # type: ignore[attr-defined]
    own = {msg_id: texts for msg_id, texts in CATALOGUE.items() if msg_id.startswith(prefix)}
    case_names({texts["en"]: texts["zh"] for texts in own.values() if not fields(texts["en"])})

    def name(key: str, **values: object) -> str:
        texts = own[prefix + key]
        en, zh = texts["en"].format(**values), texts["zh"].format(**values)
        case_names({en: zh})
        return en
    return name


def fmt_dtype(d: torch.dtype | None) -> str:
    return str(d).replace("torch.", "") if d is not None else "-"


def randn(shape, gen: torch.Generator, dtype: torch.dtype, device: str, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype).to(device)


def draw_int(gen: torch.Generator, lo: int, hi: int) -> int:
    """An integer from lo to hi inclusive, from the run's generator."""
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def draw_choice(gen: torch.Generator, options: Sequence):
    return options[draw_int(gen, 0, len(options) - 1)]


def dtype_tag(dtype: torch.dtype) -> str:
    return f"dtype:{fmt_dtype(dtype)}"


def place(t: torch.Tensor, name: str, guard: bool, perm: tuple[int, ...] | None = None
          ) -> tuple[torch.Tensor, list[Guarded]]:
    """A copy of t for the learner: inside NaN guard regions when `guard`, laid out as t.permute(perm) if given."""
    if guard:
        view, g = guarded_copy(t, name, perm)
        return view, [g]
    if perm:
        return t.permute(perm).contiguous().permute(inverse_perm(perm)), []
    return t.clone(), []


FAR_FRONT = 1 << 31  # elements of untouched storage before a far view: an offset that wrapped lands there


def far_view(t: torch.Tensor, stride: int, skip: int = 0) -> torch.Tensor:
    """t (N, ...) as entries skip, skip + 1, ... of a view whose entries along dim 0 lie `stride` elements apart,
    FAR_FRONT elements into a storage that is otherwise never touched (the OS gives untouched memory no pages), so
    offsets past 2**31 elements cost nothing; an int32 offset that wrapped lands in the front gap, where no tensor
    is, and the interpreter's bounds check says so."""
    per = t[0].numel()
    if per > stride:
        raise ValueError(f"an entry of {per} elements does not fit a stride of {stride}")  # not shown: a spec error
    n = t.shape[0] + skip
    storage = torch.empty(FAR_FRONT + (n - 1) * stride + per, dtype=t.dtype, device=t.device)
    view = storage.as_strided((n, *t.shape[1:]), (stride, *t.contiguous()[0].stride()), FAR_FRONT)
    view[skip:] = t
    return view


def bf16_graded(env: Environment) -> bool:
    """bf16 cases only where the GPU has bf16 tensor cores (sm_80+): torch counts emulation on older GPUs as support."""
    return not env.interpreter and env.capability is not None and tuple(env.capability) >= (8, 0)


def on(env: Environment, gpu_value, interpreter_value):
    """Sizes shrink on the interpreter, which is slow."""
    return interpreter_value if env.interpreter else gpu_value


# --------------------------------------------------------------------------------------------------- judging
def tensor_like(out: Any, ref: torch.Tensor, problems: list[str], label: str, device: str) -> bool:
    """A tensor of ref's shape on the inputs' device; otherwise say what it is instead."""
    if not isinstance(out, torch.Tensor):
        problems.append(T("not_tensor_none" if out is None else "not_tensor", label=label, got=type(out).__name__))
        return False
    if tuple(out.shape) != tuple(ref.shape):
        problems.append(T("wrong_shape", label=label, got=tuple(out.shape), want=tuple(ref.shape)))
        return False
    if out.device.type != device:
        problems.append(T("wrong_device", label=label, got=out.device, want=device))
        return False
    return True


class Exercise:
    """An exercise: override `case_builders`; override `judge`, `diagnose`, `nonfinite_hint` where needed."""

    #: "only cases tagged T fail" -> this hint (a messages.Text). Only concepts this exercise's code has.
    hint_texts: dict[str, Text] = {}
    #: tags whose hint shows when every failing case has the tag, though some passing cases have it too (a mistake
    #: that only some of those cases expose, e.g. loop bounds left top-left: right wherever N_q = N_k)
    partial_hint_tags: frozenset[str] = frozenset()
    #: the hints a learner asks for with grader.hint(id, todo), in steps: per TODO (the key is how the learner's
    #: stub names it, e.g. "TODO 3" or "dK/dV step"; "" for an exercise with one part), the idea, then the math,
    #: then the shape of the code (never the line itself). Each step a messages.Text.
    ladder: dict[str, tuple[Text, ...]] = {}
    #: guard every allocation the function makes (a kernel can write out of bounds)
    triton: bool = False
    #: per-case time budget when no reference timing is available, in seconds
    budget_s: float = 60.0
    #: keep the learner's passing code where later notebooks look for it (grader.notebooks.keep_passing_code)
    keep_on_pass: bool = False
    #: the exercise runs in a model of a machine (notebook 11's pipeline simulator): the report does not name the
    #: machine it was graded on, which changes nothing
    simulated: bool = False
    #: torch functions (and Tensor methods) of these names the learner must not call: what the exercise asks them
    #: to write (its TODO says so); a call fails the case
    forbidden: tuple[str, ...] = ()

    def __init__(self, id: str, title: Text | str, notebook: str, function: str, signature: str) -> None:
        self.id, self.title, self.notebook, self.function, self.signature = id, title, notebook, function, signature

    @property
    def hints(self) -> dict[str, str]:
        """The hints by tag, in the language in force."""
        return {tag: str(text) for tag, text in self.hint_texts.items()}

    def __repr__(self) -> str:
        return f"<exercise {self.id} ({self.notebook})>"

    def case_builders(self, env: Environment) -> list[CaseBuilder]:
        raise NotImplementedError

    def hidden_case_builders(self, env: Environment) -> list[CaseBuilder]:
        """Cases only batch grading (python -m grader.grade) adds, e.g. sizes drawn at random: none by default."""
        return []

    def invoke(self, fn: Callable, args: tuple, kwargs: dict, extra: dict[str, torch.Tensor]) -> Any:
        """What one case runs of the learner's code; its value is what `judge` gets. Override when a case runs
        more than the call (autograd: the backward too). Runs in the learner's process, so it must not need the
        answer."""
        if not self.forbidden:
            return fn(*args, **kwargs)
        with RecordCalls(self.forbidden) as calls:
            value = fn(*args, **kwargs)
        if calls.called:
            raise ForbiddenCall(forbidden_message(calls.called))
        return value

    def make_cases(self, env: Environment, gen: torch.Generator) -> list[Case]:
        """Every case of one run (tests and calibration use this; grader.check builds them one at a time)."""
        return [build(gen) for build in self.case_builders(env)]

    def repeat_builder(self, builders: list[CaseBuilder]) -> CaseBuilder | None:
        """A case that repeats the first case's shapes with fresh values: a function that caches by shape fails it."""
        if not builders:
            return None
        first = builders[0]

        def again(gen: torch.Generator) -> Case:
            case = first(gen)
            case.name = f"{case.name}, again with fresh values"  # not shown as is: case_label translates it
            case.tags = case.tags | {"repeat"}
            return case
        return again

    # -- judging ---------------------------------------------------------------------------------------------
    def speed_cases(self, env: Environment, fn: Callable, seed: int, passed: bool) -> tuple[list, list[str]]:
        """Cases that time fn on this GPU after the correctness cases (`passed`: whether they all passed), and
        notes for the report. None by default: most exercises are about correctness."""
        return [], []

    def judge(self, out: Any, case: Case, res, device: str) -> bool:
        """Default: one tensor, judged against case.expected at case.dtype's tolerance."""
        return self.judge_tensor(out, case.expected, case, res, output_label(), self.axis_names(case), device)

    def axis_names(self, case: Case) -> tuple[str, ...]:
        ref = case.expected
        rows, columns = T("axis_rows"), T("axis_columns")
        names = {2: (rows, columns), 3: (T("axis_dim", i=0), rows, columns), 1: (T("axis_elements"),)}
        return names.get(ref.dim(), tuple(T("axis_dim", i=i) for i in range(ref.dim())))

    def tolerance_for(self, case: Case) -> tuple[float, float]:
        """(atol, rtol) of the case's outputs: the dtype's, unless the exercise's quantity has its own."""
        return tolerance(case.dtype)

    def diagnose(self, out64: torch.Tensor, case: Case, wrong: torch.Tensor) -> list[str]:
        """Hints for an output that is wrong at `wrong`: where, and which simulated bug explains it."""
        return []

    def failure_hints(self, case: Case, kind: str, message: str) -> list[str]:
        """Hints of this exercise's own for a call that did not return (kind: an Outcome's, e.g. "exception";
        message: what the report says of it). None by default."""
        return []

    def nonfinite_hint(self, case: Case) -> str:
        return T("nonfinite_guarded" if case.guards else "nonfinite_plain")

    def judge_tensor(self, out: Any, ref: torch.Tensor, case: Case, res, label: str,
                     axis_names: Sequence[str], device: str) -> bool:
        if not tensor_like(out, ref, res.problems, label, device):
            return False
        if case.dtype is not None and out.dtype != case.dtype:
            res.problems.append(T("wrong_dtype", label=label, got=fmt_dtype(out.dtype), want=fmt_dtype(case.dtype)))
            return False
        out64 = out.detach().to(torch.float64).cpu()
        ref64 = ref.to(torch.float64).cpu()
        finite_ref = torch.isfinite(ref64)
        bad_nonfinite = ~torch.isfinite(out64) & finite_ref
        diff = (out64 - ref64).abs().where(finite_ref, torch.zeros_like(out64))
        res.tol = self.tolerance_for(case)
        both = finite_ref & torch.isfinite(out64)
        res.max_abs = float(diff[both].max()) if both.any() else float("nan")
        denom = float(ref64[finite_ref].norm()) if finite_ref.any() else 0.0
        res.rel_err = float(diff[both].norm()) / denom if denom > 0 else None
        ok = diagnosis.close(out64, ref64, case.dtype, tol=res.tol)
        allowed = res.tol[0] + res.tol[1] * ref64.abs()
        res.ratio = float((diff / allowed)[both].max()) if both.any() else None
        if bad_nonfinite.any():
            n = int(bad_nonfinite.sum())
            kind = "NaN" if torch.isnan(out64).any() else "Inf"
            res.max_abs = res.rel_err = float("nan") if kind == "NaN" else float("inf")  # not the finite part's
            spots = diagnosis.where(bad_nonfinite, axis_names)
            res.problems.append(T("nonfinite_at", label=label, n=n, kind=kind, spots=T("list_sep").join(spots))
                                if spots else T("nonfinite", label=label, n=n, kind=kind))
            res.hints.append(self.nonfinite_hint(case))
        if not ok.all():
            if not bad_nonfinite.any():
                res.problems.append(T("outside_tolerance", label=label, n=int((~ok).sum()), total=ok.numel()))
            spots = diagnosis.where(~ok, axis_names)
            if spots:
                res.hints.append(T("mismatches_only_in", spots=T("list_sep").join(spots)))
            res.hints += self.diagnose(out64, case, ~ok)
            return False
        return not bad_nonfinite.any()


def with_inputs(case: Case, *, guard: bool = False, layouts: dict[str, tuple[int, ...]] | None = None,
                **tensors: torch.Tensor) -> Case:
    """Hand the learner copies of `tensors` (positional, before case.args), inside NaN guard regions when `guard`,
    and watch them for in-place writes. `layouts`: name -> perm, for a tensor laid out as t.permute(perm) in
    memory (non-contiguous, same values)."""
    placed = {}
    for name, t in tensors.items():
        placed[name], guards = place(t, name, guard, (layouts or {}).get(name))
        case.guards += guards
    case.args = tuple(placed.values()) + case.args
    case.inputs = placed
    return case
